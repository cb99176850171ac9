"""The task spec: what a user writes to ask for rollouts (TaskSpec and its parts).

Strict (unknown fields are errors) and registry-free: builder names and
configs are checked by `polar.builders.check_builder` at submit and in the
build activity, harness and evaluator kinds and configs by their kinds' own
models (activities/task_kinds.py) at submit and in the worker, never while a
workflow decodes its input.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from polar.ids import TaskId
from polar.tasks.collect_spec import CollectSpec
from polar.tasks.evaluator_spec import EvaluatorSpec, RubricSpec
from polar.tasks.mcp_spec import McpServerSpec, unset_header_variables
from polar.tasks.runtime_spec import (
    DEFAULT_WORKDIR,
    LOCAL_HARNESS_USER,
    MAX_SIZE,
    MIN_SIZE,
    NetworkSpec,
    RuntimeSpec,
    Sidecar,
    check_collect_services,
    parse_size,
    workdir_problem,
)
from polar.tasks.sources import (
    CommandAction,
    DirSource,
    GitSource,
    PrepareAction,
    Source,
    UploadAction,
)
from polar.tasks.steps import MAX_STEPS, StepRule, TaskStep
from polar.tasks.strict import MAX_TIMEOUT_S, KindSpec, StrictModel

__all__ = [
    "DEFAULT_WORKDIR",
    "MAX_SIZE",
    "MAX_TIMEOUT_S",
    "MIN_SIZE",
    "BuilderSpec",
    "CommandAction",
    "DirSource",
    "EvaluatorSpec",
    "GitSource",
    "HarnessSpec",
    "InfraErrors",
    "McpServerSpec",
    "NetworkSpec",
    "PrepareAction",
    "RubricSpec",
    "RuntimeSpec",
    "Sidecar",
    "Source",
    "StrictModel",
    "TaskSpec",
    "TaskStep",
    "Timeouts",
    "UploadAction",
    "parse_size",
    "workdir_problem",
]


class HarnessSpec(KindSpec):
    """The agent program: a harness `kind` by name, checked with its config by the kind's own
    model where the harnesses are (activities/harnesses/: the worker before the harness
    runs, `polar submit` / `polar tasks load` before submitting).

    `command`: a shell command run in the workspace (its `command`, required, is the
    kind's config). `codex`, `claude_code`, `qwen_code`, `pi`: the real CLI, configured in a
    fresh HOME to call the gateway, run non-interactively with the task's instruction (they
    take no `command`). A kind's own config goes under the key its name gives. What every
    kind shares: `args` are appended to the command line, `env` overrides the harness's
    environment, `model` and `unknown_models`; `skills_dir` is copied where the harness
    reads its skills (each adapter's `skills_folder`); `mcp_servers` go into its own MCP
    config (each adapter's `mcp_config`; a kind that takes none refuses them).
    """

    kind: str = Field(
        default="command",
        min_length=1,
        description="a harness kind the worker registers (activities/harnesses: command, "
        "codex, claude_code, qwen_code, pi)",
    )
    command: str | None = Field(default=None, description="(command) the shell command")
    model: str = Field(default="policy", description="model name the harness is told to use")
    args: list[str] = Field(default_factory=list, description="extra command-line arguments")
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: str | None = Field(
        default=None,
        min_length=1,
        exclude_if=lambda v: v is None,  # unset: the JSON the core always dumped
        description="a directory in the runtime (absolute, or relative to the workdir) whose "
        "contents, one folder per Agent Skill, are copied into the harness's own skills "
        "folder before it starts; kind `command` is told it in $POLAR_SKILLS_DIR",
    )
    mcp_servers: list[McpServerSpec] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,  # none: the JSON the core always dumped
        description="MCP servers the harness spawns in the sandbox (stdio) or reaches by URL "
        "(sse, streamable-http), given through its own MCP config (polar/tasks/mcp_spec.py)",
    )
    unknown_models: Literal["policy", "refuse"] = Field(
        default="policy",
        description="a call naming a model that is neither `model`, the gateway's own nor one "
        "of its pools': served by the policy (`policy`), or answered 404 `model_not_found` in "
        "the caller's shape (`refuse`)",
    )

    @field_validator("mcp_servers")
    @classmethod
    def _names_unique(cls, servers: list[McpServerSpec]) -> list[McpServerSpec]:
        names = [s.name for s in servers]
        if dup := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"MCP server names must be unique: {', '.join(dup)} repeated")
        return servers

    @model_validator(mode="after")
    def _headers_resolve(self) -> HarnessSpec:
        """Every `${VAR}` (without a default) of an MCP server's headers is in `env`: the
        harness resolves them there, never from the worker's own environment."""
        if unset := unset_header_variables(self.mcp_servers, self.env):
            raise ValueError(f"mcp_servers: {unset[0]} is not in the harness's env")
        return self


class BuilderSpec(StrictModel):
    """Which trajectory builder turns completions into traces, with its config."""

    name: str = "per_request"
    config: dict[str, Any] = Field(default_factory=dict)


def _stage_timeout(default: float) -> Any:
    return Field(default=default, ge=1, le=MAX_TIMEOUT_S, allow_inf_nan=False)


class Timeouts(StrictModel):
    """Per-stage limits in seconds, each from 1 s to 7 days. `harness_s` is the harness's
    own time budget."""

    prepare_s: float = _stage_timeout(300)
    harness_s: float = _stage_timeout(1800)
    build_s: float = _stage_timeout(300)
    evaluate_s: float = _stage_timeout(600)
    teardown_s: float = _stage_timeout(120)
    heartbeat_s: float = _stage_timeout(30)
    max_attempts: int = Field(default=3, ge=1, le=20)
    host_wait_s: float | None = Field(
        default=None,
        ge=1,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="how long a stage may wait for its runtime's host to start it before the "
        "host is probed (a lost host's sessions are placed again after it); default: "
        "max(60, 4 x heartbeat_s)",
    )

    def host_wait(self) -> float:
        """`host_wait_s`, or its default."""
        return self.host_wait_s if self.host_wait_s is not None else max(60.0, 4 * self.heartbeat_s)


class InfraErrors(StrictModel):
    """What a task does with a session that ends `infra_error` (polar/outcomes.py): the stack
    failed it, so it is no verdict on the policy and never trains.

    `group`: `wait` runs it again on fresh ground (another host when the host was the cause),
    up to `retries` times, and the task's result waits for it; one that still fails leaves
    the group. `shrink` runs nothing again: it leaves the group at once (the baseline is over
    the rest). `drop` runs nothing again and leaves the whole group untrained."""

    group: Literal["wait", "shrink", "drop"] = "wait"
    retries: int = Field(default=2, ge=0, le=10)


class TaskSpec(StrictModel):
    """One rollout task: N sessions (one GRPO group) of a harness on one problem."""

    task_id: TaskId
    instruction: str = ""
    num_sessions: int = Field(default=1, ge=1, le=1024)
    source: Source | None = None
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    harness: HarnessSpec
    builder: BuilderSpec = Field(default_factory=BuilderSpec)
    evaluator: EvaluatorSpec = Field(default_factory=EvaluatorSpec)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    infra_errors: InfraErrors = Field(default_factory=InfraErrors)
    metadata: dict[str, Any] = Field(default_factory=dict)
    min_usable_sessions: int | None = Field(
        default=None,
        ge=1,
        description="early stop: finish once this many sessions completed with traces, "
        "cancelling the rest (they end as cancelled)",
    )
    priority: int | None = Field(
        default=None,
        ge=1,
        le=5,
        description="Temporal priority key of the task's sessions and stages: 1 goes first; "
        "None inherits (the server default is 3)",
    )
    policy_version: int | None = Field(
        default=None,
        ge=0,
        description="version of the policy serving this task; copied into every trace's "
        "provenance (default: metadata['policy_version'] when it is an int)",
    )
    steps: list[TaskStep] = Field(
        default_factory=list,
        max_length=MAX_STEPS,
        description="a multi-step task: instructions given one after another in the "
        "session's runtime, each graded (polar/tasks/steps.py); empty: one instruction",
    )
    step_reward: StepRule = Field(
        default="mean", description="the session's reward from its steps': mean or final"
    )

    @model_validator(mode="after")
    def _task_control(self) -> TaskSpec:
        if self.min_usable_sessions is not None and self.min_usable_sessions > self.num_sessions:
            raise ValueError(
                f"min_usable_sessions ({self.min_usable_sessions}) cannot exceed "
                f"num_sessions ({self.num_sessions})"
            )
        if self.steps:
            self._check_steps()
        tagged = self.metadata.get("policy_version")
        if self.policy_version is None and isinstance(tagged, int) and not isinstance(tagged, bool):
            self.policy_version = tagged
        return self

    def _check_steps(self) -> None:
        names = [step.name for step in self.steps]
        if len(set(names)) != len(names):
            raise ValueError(f"steps: names must be unique, got {names}")
        for step in self.steps:  # each step's run and grade is a stage the task's times cut
            for mine, stage in ((step.harness_s, "harness_s"), (step.evaluate_s, "evaluate_s")):
                if mine is not None and mine > getattr(self.timeouts, stage):
                    raise ValueError(
                        f"steps.{step.name}: its {stage} {mine:g} is past the task's "
                        f"timeouts.{stage} {getattr(self.timeouts, stage):g}"
                    )
            if step.harness_user is not None and self.runtime.kind == "local":
                raise ValueError(f"steps.{step.name}: {LOCAL_HARNESS_USER}")
            try:
                check_collect_services(step.collect, self.runtime)
            except ValueError as exc:
                raise ValueError(f"steps.{step.name}: {exc}") from None
        judged = [self.evaluator, *(s.evaluator for s in self.steps if s.evaluator)]
        if any(e.rubric is not None for e in judged):
            raise ValueError("steps: a rubric judge reads the whole session; not with steps")

    def collect_for(self, step: TaskStep | None) -> CollectSpec | None:
        """What a run collects after its harness: the runtime's `collect`, then the step's
        (None: nothing)."""
        spec = self.runtime.collect.plus(step.collect if step else None)
        return None if spec.empty else spec

    def step(self, name: str) -> TaskStep:
        """The step named `name` (KeyError where there is none)."""
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f"task {self.task_id} has no step {name!r}")

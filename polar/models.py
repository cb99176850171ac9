"""Pydantic models of every payload Polar passes around.

Workflow inputs and results, activity inputs and results, the gateway's
CompletionRecord and the trainer-facing Trace all live here, so that the
workflows, the activities, the gateway and the trainer SDK share one
definition. Everything is JSON-serialisable and goes through Temporal's
pydantic data converter.
"""

from __future__ import annotations

import math
import re
import shlex
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from polar.host_paths import checked_host_path

# --------------------------------------------------------------------------- ids

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
"""Task and session ids (with `checked_id`'s no-'..' rule): they become file names and S3 key
segments, so no '/', no leading '.' or '-', at most 200 characters."""
TASK_ID_MAX = 128
"""A task id leaves room for what its session ids add (`-{nonce}-s{i}`, `-eval`)."""


class InvalidId(ValueError):
    """A task or session id that is not safe as a file name or an S3 key segment."""


def checked_id(value: object, what: str = "id") -> str:
    """`value` if it is a safe id (ID_PATTERN, no '..'), else InvalidId naming it.

    The one check for every place an id becomes a path or a key: storage keys,
    runtime dirs, session keys, workflow input.
    """
    if not isinstance(value, str) or not re.fullmatch(ID_PATTERN, value) or ".." in value:
        raise InvalidId(
            f"invalid {what} {value!r:.80}: use 1-200 of A-Z a-z 0-9 . _ -, starting with a "
            "letter or digit, without '..'"
        )
    return value


def _session_id(value: str) -> str:
    return checked_id(value, "session id")


def _task_id(value: str) -> str:
    return checked_id(value, "task id")


SessionId = Annotated[str, AfterValidator(_session_id)]
TaskId = Annotated[str, Field(max_length=TASK_ID_MAX), AfterValidator(_task_id)]


class StrictModel(BaseModel):
    """Base for user-facing specs: unknown fields are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- task spec

MAX_TIMEOUT_S = 7 * 86400
"""The longest any stage, action or container may be given (finite: timers must fit)."""
_GIT_HELPER = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")


def _git_arg(value: str, what: str) -> str:
    """A git url or ref git cannot read as an option: not empty, no control characters or
    surrounding blanks, no leading '-'."""
    if not value or value != value.strip() or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(
            f"{what} {value!r:.80} must be non-empty, without control characters "
            "or surrounding blanks"
        )
    if value.startswith("-"):
        raise ValueError(f"{what} {value!r:.80} starts with '-': git would read it as an option")
    return value


class DirSource(StrictModel):
    """Copy a directory of the worker host into the session's workspace: never `/` or a
    system directory (polar/host_paths.py)."""

    type: Literal["dir"] = "dir"
    path: str = Field(min_length=1)

    @field_validator("path")
    @classmethod
    def _allowed_path(cls, v: str) -> str:
        return checked_host_path(v, "source.path")


class GitSource(StrictModel):
    """Clone a git repository and check out `ref` (a branch, tag or commit).

    `url`: `https://`, `ssh://`, `git://`, `user@host:path`, or a local path
    (checked like `source.path`). Refused: a url or ref starting with '-' (git
    would read an option), remote helpers (`ext::`, `fd::`, any `<helper>::`,
    which run commands), and `file://` URLs (give the local path instead: one
    spelling for local repositories, checked one way).
    """

    type: Literal["git"] = "git"
    url: str
    ref: str | None = None

    @field_validator("url")
    @classmethod
    def _safe_url(cls, v: str) -> str:
        _git_arg(v, "git url")
        if _GIT_HELPER.match(v):
            raise ValueError(
                f"git url {v!r:.80} names a remote helper ('<transport>::', such as ext::), "
                "which runs commands: use https://, ssh://, git:// or a local path"
            )
        if v.lower().startswith("file:"):
            raise ValueError(
                f"git url {v!r:.80}: file:// URLs are refused, give the repository's local "
                "path instead (checked like source.path)"
            )
        return checked_host_path(v, "git url")

    @field_validator("ref")
    @classmethod
    def _safe_ref(cls, v: str | None) -> str | None:
        if v is not None and any(c.isspace() for c in _git_arg(v, "git ref")):
            raise ValueError(f"git ref {v!r:.80} has blanks: not a branch, tag or commit")
        return v


Source = Annotated[DirSource | GitSource, Field(discriminator="type")]


class UploadAction(StrictModel):
    """Prepare action: copy a file or folder from the worker host into the runtime.

    A relative `dest` is relative to the workspace.
    """

    type: Literal["upload"] = "upload"
    src: str = Field(min_length=1, description="never / or a system directory (host_paths.py)")
    dest: str

    @field_validator("src")
    @classmethod
    def _allowed_src(cls, v: str) -> str:
        return checked_host_path(v, "upload src")


class CommandAction(StrictModel):
    """Prepare action: run a shell command in the workspace; retried on a non-zero exit."""

    type: Literal["run"] = "run"
    command: str = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=600, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    retries: int = Field(default=0, ge=0, le=10)


PrepareAction = Annotated[UploadAction | CommandAction, Field(discriminator="type")]


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
MIN_SIZE, MAX_SIZE = 16 << 20, 1 << 50
"""Bounds of a container's memory and disk limits (16m to 1 PiB)."""


def parse_size(text: str) -> int:
    """Bytes in a docker-style size: `512`, `64m`, `4g` (binary units)."""
    match = re.fullmatch(r"([0-9]+)([bkmgBKMG]?)", text.strip())
    if match is None:
        raise ValueError(f"not a size: {text!r} (e.g. '512m', '4g')")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


class RuntimeSpec(StrictModel):
    """Where a session runs.

    `local`: a trusted, dev-only work dir on the worker host, the harness as an
    unprivileged user in its own PID and network namespaces (zero setup, default).
    `docker`: one container per session from `image` (built locally, see
    infra/images/build.py), the source in /workspace, no network (its only way
    out is the session's gateway channel), CPU, memory, pids and disk limits by
    default, and a wall-clock budget after which the container stops.
    `podman`: the same container sessions with the daemonless `podman` CLI,
    rootless where the host allows (activities/runtimes/podman.py).
    `prepare` actions run after the source is in place, in every kind.
    """

    kind: Literal["local", "docker", "podman"] = "local"
    image: str = Field(default="polar/runtime:py311", description="docker: the image to run")
    cpus: float | None = Field(
        default=2.0, ge=0.1, le=512, description="containers: CPU limit (None: the default)"
    )
    memory: str | None = Field(
        default="4g", pattern=r"^[0-9]+[bkmgBKMG]?$", description="containers: memory, e.g. '2g'"
    )
    pids: int | None = Field(
        default=1024, ge=16, le=1_000_000, description="containers: process limit"
    )
    disk: str | None = Field(
        default="10g",
        pattern=r"^[0-9]+[bkmgBKMG]?$",
        description="containers: most bytes the session may write (its writable layer)",
    )
    wall_clock_s: float = Field(
        default=4 * 3600,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="docker: the container's whole lifetime",
    )
    prepare: list[PrepareAction] = Field(default_factory=list)

    @field_validator("memory", "disk")
    @classmethod
    def _sane_size(cls, v: str | None) -> str | None:
        if v is not None and not MIN_SIZE <= parse_size(v) <= MAX_SIZE:
            raise ValueError(f"{v!r} is not between 16m and {MAX_SIZE >> 30}g")
        return v


class HarnessSpec(StrictModel):
    """The agent program (activities/harnesses/).

    `command`: a shell command run in the workspace (`command` required).
    `codex`, `claude_code`, `qwen_code`, `pi`: the real CLI, configured in a
    fresh HOME to call the gateway, run non-interactively with the task's
    instruction. `args` are appended to the command line, `env` overrides the
    harness's environment.
    """

    kind: Literal["command", "codex", "claude_code", "qwen_code", "pi"] = "command"
    command: str | None = None
    model: str = Field(default="policy", description="model name the harness is told to use")
    args: list[str] = Field(default_factory=list, description="extra command-line arguments")
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _command_for_command_kind(self) -> HarnessSpec:
        if self.kind == "command" and not (self.command and self.command.strip()):
            raise ValueError("harness kind 'command' needs a non-empty 'command'")
        if self.kind != "command" and self.command is not None:
            raise ValueError(
                f"harness kind {self.kind!r} runs its own CLI: 'command' is only for kind "
                "'command' (use 'args' for extra arguments)"
            )
        return self


class BuilderSpec(StrictModel):
    """Which trajectory builder turns completions into traces, with its config."""

    name: str = "per_request"
    config: dict[str, Any] = Field(default_factory=dict)


class SweBenchSpec(StrictModel):
    """A SWE-bench-style instance's grading (activities/evaluators/swebench.py).

    The session's patch (`git diff` of its workspace against `base_commit`,
    junk filtered) is applied in a fresh runtime of the same source, then the
    `test_patch`, then the tests run; reward 1 only if every `fail_to_pass`
    test passes and every `pass_to_pass` test still passes.
    """

    instance_id: str
    repo: str = ""
    base_commit: str = Field(min_length=4)
    test_patch: str = ""
    fail_to_pass: list[str] = Field(min_length=1)
    pass_to_pass: list[str] = Field(default_factory=list)
    test_cmd: str | None = Field(
        default=None,
        description="test command; `{test_files}` is replaced by the test files, else they "
        "are appended (default: python -m pytest -rA -p no:cacheprovider)",
    )
    test_files: list[str] | None = Field(
        default=None, description="default: the files of the test ids and of the test patch"
    )
    install: str | None = Field(
        default=None,
        description="run while preparing the evaluator's runtime (during the harness, within "
        "`timeouts.prepare_s`), before the patches; a failure is an evaluator error",
    )
    log_parser: str | None = Field(
        default=None,
        description="trusting mode, for test commands that are not pytest: a swebench "
        "PARSER_REGISTRY name whose parser reads per-test status from the test log (which the "
        "code under test can print to). Default: pytest's own reports, written by Polar's "
        "plugin to a file outside the workspace",
    )
    exclude: list[str] = Field(
        default_factory=list, description="extra junk globs left out of the session's patch"
    )

    @field_validator("base_commit")
    @classmethod
    def _safe_commit(cls, v: str) -> str:
        return _git_arg(v, "swebench.base_commit")


class EvaluatorSpec(StrictModel):
    """How a session is scored.

    `command`: exit code 0 means reward 1, else 0. `swebench`: the instance's
    tests on the session's patch in a fresh runtime (`swebench` required).
    """

    kind: Literal["command", "swebench", "none"] = "none"
    command: str | None = None
    swebench: SweBenchSpec | None = None
    protected: list[str] = Field(
        default_factory=list,
        description="task-owned paths (globs: `*` within a name, `**/` any folders) restored "
        "before grading: the harness's changes to them are dropped from its patch",
    )
    reward_range: tuple[float, float] = Field(
        default=(0.0, 1.0), description="rewards (session and per-trace) are clamped to it"
    )

    @model_validator(mode="after")
    def _command_needed(self) -> EvaluatorSpec:
        if self.kind == "command" and not self.command:
            raise ValueError("evaluator kind 'command' needs a non-empty 'command'")
        if self.kind == "swebench" and self.swebench is None:
            raise ValueError("evaluator kind 'swebench' needs its 'swebench' instance fields")
        lo, hi = self.reward_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"reward_range must be finite with lo < hi, not {self.reward_range}")
        return self

    def eval_runtime_spec(self, runtime: RuntimeSpec) -> RuntimeSpec:
        """The spec of the evaluator's fresh runtime: the task's, then (swebench) the checkout
        of `base_commit` and the instance's install as prepare actions, so they run while
        the harness does."""
        if self.kind != "swebench" or self.swebench is None:
            return runtime
        base = shlex.quote(self.swebench.base_commit)
        git = "git -c safe.directory=* -c core.hooksPath=/dev/null"
        checkout = (
            f'[ "$({git} rev-parse HEAD)" = "$({git} rev-parse {base}^{{commit}})" ] '
            f"|| {git} checkout --quiet {base}"
        )
        actions: list[PrepareAction] = [CommandAction(command=checkout, timeout_s=300)]
        if self.swebench.install:
            actions.append(CommandAction(command=self.swebench.install))
        return runtime.model_copy(update={"prepare": [*runtime.prepare, *actions]})


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

    @model_validator(mode="after")
    def _task_control(self) -> TaskSpec:
        if self.min_usable_sessions is not None and self.min_usable_sessions > self.num_sessions:
            raise ValueError(
                f"min_usable_sessions ({self.min_usable_sessions}) cannot exceed "
                f"num_sessions ({self.num_sessions})"
            )
        tagged = self.metadata.get("policy_version")
        if self.policy_version is None and isinstance(tagged, int) and not isinstance(tagged, bool):
            self.policy_version = tagged
        return self

    @field_validator("builder")
    @classmethod
    def _known_builder(cls, v: BuilderSpec) -> BuilderSpec:
        from polar.builders import BUILDERS  # the registry imports these models

        if ":" not in v.name and v.name not in BUILDERS:
            raise ValueError(
                f"unknown builder {v.name!r}: use one of {sorted(BUILDERS)} "
                "or an import path 'module:function'"
            )
        from polar.builders import validate_builder_config

        validate_builder_config(v.name, v.config)
        return v


class SpecRef(BaseModel):
    """Where a task's full TaskSpec lies in S3 and what it hashes to (polar/spec_ref.py)."""

    key: str
    sha256: str
    size: int


class SessionSpec(BaseModel):
    """Input of one Session child workflow."""

    session_id: SessionId
    index: int
    task: TaskSpec
    spec_ref: SpecRef | None = None
    """Set when `task` is a slim copy: the full spec (instruction, test patch) is in S3."""


# --------------------------------------------------------------------------- stages


class SessionStatus(StrEnum):
    """Terminal status of a session."""

    COMPLETED = "completed"  # harness exited 0
    HARNESS_FAILED = "harness_failed"  # harness exited non-zero
    TIMEOUT = "timeout"  # harness ran past its time budget
    ERROR = "error"  # a stage failed after its retries
    CANCELLED = "cancelled"


class Stage(StrEnum):
    PENDING = "pending"
    PREPARE = "prepare"
    RUN = "run"
    BUILD = "build"
    EVALUATE = "evaluate"
    TEARDOWN = "teardown"
    DONE = "done"


class RuntimeHandle(BaseModel):
    """What prepare_runtime hands to later stages."""

    kind: str
    session_id: str
    workdir: str
    host: str
    baseline: str | None = None
    """The workspace's git commit right after prepare (made by Polar when the source is not a
    git work tree): what the session's changes are diffed against. None: prepared by older
    code, or the workspace has no git."""
    host_id: str | None = None
    """The host holding the runtime (`POLAR_HOST_ID` of the worker that prepared it); None:
    prepared by older code."""
    host_queue: str | None = None
    """That host's queue prefix (`{queue}-host-{host_id}`): later stages that touch the
    runtime go to its `-init`/`-run`/`-postrun` queues. None: the shared queues."""


class TeardownResult(BaseModel):
    """What teardown found: `found` False means there was no runtime to remove."""

    session_id: str
    host_id: str
    found: bool


class PrepareRequest(BaseModel):
    session_id: str
    task_id: str
    runtime: RuntimeSpec
    source: Source | None = None


class HarnessRequest(BaseModel):
    session_id: str
    task_id: str
    runtime: RuntimeHandle
    harness: HarnessSpec
    instruction: str
    budget_s: float
    spec_ref: SpecRef | None = None
    """Set when `instruction` was left out: the activity reads it from the stored spec."""
    attempt_base: int = 0
    """Added to the activity's attempt number: a re-issued run stage (another placement of the
    session) records its calls and logs under attempts of its own."""


class HarnessResult(BaseModel):
    status: Literal["completed", "failed", "timeout"]
    exit_code: int | None
    duration_s: float
    stdout_key: str
    stderr_key: str
    attempt: int
    artifact_keys: list[str] = Field(
        default_factory=list,
        description="the harness's native logs and $POLAR_ARTIFACTS_DIR files kept in S3",
    )
    artifacts_skipped: list[str] = Field(
        default_factory=list,
        description="files of $POLAR_ARTIFACTS_DIR not kept, and why (symlink, size, count)",
    )
    detail: str | None = Field(
        default=None, description="why the runtime stopped the harness, e.g. a resource limit"
    )


class BuildRequest(BaseModel):
    session_id: str
    task_id: str
    harness: str
    builder: BuilderSpec
    policy_version: int | None = None


class BuildResult(BaseModel):
    traces_key: str
    num_completions: int
    num_traces: int
    num_response_tokens: int
    trace_bytes: int
    unusable_completions: int = 0
    breaks: dict[str, int] = Field(
        default_factory=dict, description="chain breaks by BreakKind (prefix_merging)"
    )
    unseen_completions: dict[str, int] = Field(
        default_factory=dict,
        description="records left out because the harness never saw their answer, by reason "
        "(client_disconnected, resent)",
    )


class EvaluateRequest(BaseModel):
    session_id: str
    task_id: str
    runtime: RuntimeHandle
    evaluator: EvaluatorSpec
    budget_s: float
    traces_key: str | None = None
    source: Source | None = None
    """The task's source: every evaluator grades in a fresh runtime made from it plus the
    session's changes (`runtime` is only read, never graded in)."""
    runtime_spec: RuntimeSpec | None = None
    """The task's runtime spec, for that fresh runtime (default: the session's kind)."""
    eval_runtime: RuntimeHandle | None = None
    """That fresh runtime, already prepared while the harness ran (prewarm); None: the
    evaluator prepares it itself. Used by the first attempt only (a retry starts fresh)."""
    spec_ref: SpecRef | None = None
    """Set when `evaluator` is slim (no test patch): the activity reads the stored spec's."""


class EvaluateResult(BaseModel):
    reward: float
    """Finite and within the evaluator's `reward_range` (clamped; `detail` says so)."""
    detail: str
    log_key: str | None = None
    trace_rewards: dict[str, float] = Field(default_factory=dict)
    """Per-trace rewards the evaluator gave (trace id → reward); others get `reward`."""
    report_key: str | None = None
    """The evaluator's JSON report in S3 (swebench: per-test results and flags)."""


class RewardRequest(BaseModel):
    traces_key: str
    reward: float | None
    status: SessionStatus
    trace_rewards: dict[str, float] = Field(default_factory=dict)


class SessionResult(BaseModel):
    """Small summary of one session; traces themselves live in S3 under `traces_key`."""

    session_id: str
    task_id: str
    index: int
    status: SessionStatus
    reward: float | None = None
    harness: str
    num_completions: int = 0
    num_traces: int = 0
    num_response_tokens: int = 0
    trace_bytes: int = 0
    traces_key: str | None = None
    trace_breaks: dict[str, int] = Field(default_factory=dict)
    """Why the builder started new traces, by break kind (prefix_merging)."""
    unseen_completions: dict[str, int] = Field(default_factory=dict)
    """Records not trained on because the harness never saw their answer, by reason."""
    harness_exit_code: int | None = None
    evaluation: str | None = None
    error: str | None = None
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    hosts: list[str] = Field(default_factory=list)
    """The hosts that held the session's runtime, in order (more than one: a host was lost
    and the session went on elsewhere)."""
    warnings: list[str] = Field(default_factory=list)
    """What went wrong without failing the session (a lost host, a runtime teardown could not
    find or reach)."""


class TaskResult(BaseModel):
    task_id: str
    sessions: list[SessionResult]
    stopped_early: bool = False
    """min_usable_sessions were in before every session finished; the rest were cancelled."""
    policy_version: int | None = None

    @property
    def usable(self) -> list[SessionResult]:
        """Sessions that completed with traces."""
        return [s for s in self.sessions if s.status == SessionStatus.COMPLETED and s.num_traces]

    @property
    def mean_reward(self) -> float | None:
        rewards = [s.reward for s in self.sessions if s.reward is not None]
        return sum(rewards) / len(rewards) if rewards else None


class SessionProgress(BaseModel):
    """Answer of the Session workflow's `progress` query."""

    session_id: str
    stage: Stage
    status: SessionStatus | None = None
    detail: str = ""


# --------------------------------------------------------------------------- records


class SampledChoice(BaseModel):
    """One choice of an answer with `n > 1`: what the upstream sampled for it."""

    index: int
    response_token_ids: list[int] | None = None
    response_logprobs: list[float] | None = None
    finish_reason: str | None = None


class CompletionRecord(BaseModel):
    """One model call as the gateway saw it, stored before the caller gets its answer.

    The top-level response fields are choice 0's. An answer of several
    choices (`n`, `candidateCount`) also lists every choice in `choices`
    (choice 0 included); a single-choice answer leaves it empty.
    """

    session_id: str
    task_id: str
    seq: int = Field(description="gateway start time in ns; orders calls across gateways")
    record_id: str
    attempt: int = 1
    provider: str = "openai_chat"
    request: dict[str, Any]
    normalized_request: dict[str, Any]
    response: dict[str, Any] | None = None
    status_code: int = 200
    error: str | None = None
    model: str | None = None
    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    response_logprobs: list[float] | None = None
    finish_reason: str | None = None
    has_token_ids: bool = False
    choices: list[SampledChoice] = Field(default_factory=list)
    started_at: float
    finished_at: float
    gateway_id: str = ""
    client_disconnected: bool = Field(
        default=False,
        description="the caller hung up before its answer was sent: the harness never saw "
        "this sample, so no builder trains on it",
    )

    def sampled(self) -> list[SampledChoice]:
        """Every choice the upstream sampled: `choices`, or choice 0 from the top-level fields."""
        if self.choices:
            return list(self.choices)
        return [
            SampledChoice(
                index=0,
                response_token_ids=self.response_token_ids,
                response_logprobs=self.response_logprobs,
                finish_reason=self.finish_reason,
            )
        ]


class BreakKind(StrEnum):
    """Why a completion could not continue an existing chain (see polar/builders/README.md)."""

    NEW_CONTEXT = "new_context"  # differs inside the chain's first prompt: compaction, sub-agent
    HISTORY_CHANGED = "history_changed"  # differs in later non-sampled history (tool output, glue)
    BRANCH = "branch"  # same context again or another turn after it: parallel call, retry
    THINK_DROPPED = "think_dropped"  # a sampled turn came back without its <think> block
    TOOL_CALL_RERENDERED = "tool_call_rerendered"  # a sampled tool call came back re-serialised
    TRUNCATED_TURN = "truncated_turn"  # a turn cut by length came back re-rendered
    RESPONSE_RETOKENIZED = "response_retokenized"  # a sampled turn came back as other tokens


class ChainBreak(BaseModel):
    """One place where a completion's prompt diverged from a chain's tokens."""

    kind: BreakKind
    record_id: str = Field(description="the completion whose prompt diverged")
    seq: int
    chain: str | None = Field(default=None, description="trace id of the chain compared against")
    position: int = Field(description="index in the completion's prompt ids of the first change")
    repaired: bool = False
    detail: str = ""


class ReconstructionStats(BaseModel):
    """How a builder made one trace, and the session-wide picture it belongs to."""

    chains: int = Field(description="traces the builder made for the session")
    members: int = Field(description="completions merged into this trace")
    started_by: ChainBreak | None = Field(
        default=None,
        description="why this chain could not continue an earlier one; None: first context",
    )
    repairs: list[ChainBreak] = Field(
        default_factory=list, description="drift repaired inside this chain (opt-in)"
    )
    session_breaks: dict[str, int] = Field(
        default_factory=dict, description="chains split off, by break kind, over the session"
    )
    session_repairs: dict[str, int] = Field(
        default_factory=dict, description="breaks repaired in place, by kind, over the session"
    )
    sampled_tokens: int = Field(default=0, description="mask-1 tokens")
    interstitial_tokens: int = Field(default=0, description="mask-0 tokens after the prompt")
    sampled_eos: int = Field(default=0, description="turns ended by a sampled end token (mask 1)")
    template_eos: int = Field(
        default=0, description="end tokens only the chat template wrote (mask 0): cut by length"
    )
    prompt_ids_rebuilt: list[str] = Field(
        default_factory=list, description="record ids whose prompt ids the tokenizer rebuilt"
    )
    unusable: int = Field(default=0, description="the session's completions no builder could use")


class TraceProvenance(BaseModel):
    session_id: str
    task_id: str
    harness: str
    builder: str
    model: str | None
    completion_seqs: list[int]
    record_ids: list[str]
    reward_policy: Literal["broadcast", "session_normalized"] = "broadcast"
    reconstruction: ReconstructionStats | None = None
    policy_version: int | None = None


class Trace(BaseModel):
    """One trainer-facing sequence: prompt, response with loss mask and logprobs, reward."""

    trace_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    response_logprobs: list[float]
    prompt_messages: list[dict[str, Any]] = Field(default_factory=list)
    response_message: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    reward: float | None = None
    status: SessionStatus | None = None
    provenance: TraceProvenance

    @model_validator(mode="after")
    def _aligned(self) -> Trace:
        n = len(self.response_ids)
        if len(self.loss_mask) != n or len(self.response_logprobs) != n:
            raise ValueError(
                f"trace {self.trace_id}: response_ids ({n}), loss_mask ({len(self.loss_mask)}) "
                f"and response_logprobs ({len(self.response_logprobs)}) must align"
            )
        return self

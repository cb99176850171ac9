"""The task spec: what a user writes to ask for rollouts (TaskSpec and its parts).

Strict (unknown fields are errors) and registry-free: builder names and
configs are checked by `polar.builders.check_builder` at submit and in the
build activity, never while a workflow decodes its input.
"""

from __future__ import annotations

import math
import posixpath
import re
import shlex
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from polar.host_paths import FORBIDDEN_HOST_DIRS, checked_host_path
from polar.ids import TaskId
from polar.network_policy import normalize_allowed_host
from polar.rubric import FormulaError, parse_formula


class StrictModel(BaseModel):
    """Base for user-facing specs: unknown fields are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


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


DEFAULT_WORKDIR = "/workspace"
"""Where a container session's workspace is unless its RuntimeSpec says otherwise."""
FORBIDDEN_WORKDIRS = (*FORBIDDEN_HOST_DIRS, "/tmp", "/var/tmp", "/tests", "/logs", "/solution")
"""Container paths a workspace may not be at or under: system dirs (the sandbox's channel is
in /run), scratch space, and where a Harbor verifier's tests and logs go."""
TOO_BROAD_WORKDIRS = frozenset({"/home", "/var", "/opt", "/srv", "/mnt", "/media"})
"""Top-level dirs that may be above a workspace but never be one."""


def workdir_problem(path: str) -> str | None:
    """Why `path` may not be a container's workspace, or None: absolute, normalised (no
    `.`, `..`, `//` or trailing `/`), printable, not `/` nor at or under FORBIDDEN_WORKDIRS,
    not one of TOO_BROAD_WORKDIRS."""
    if not path.startswith("/"):
        return "is not absolute"
    if any(ord(c) < 32 or ord(c) == 127 for c in path) or len(path) > 255:
        return "has control characters or is over 255 characters"
    if path == "/":
        return "is the root directory"
    if posixpath.normpath(path) != path or path.startswith("//"):
        return f"is not normalised (write {posixpath.normpath(path)!r})"
    for top in FORBIDDEN_WORKDIRS:
        if path == top or path.startswith(top + "/"):
            return f"is in the system or reserved directory {top}"
    if path in TOO_BROAD_WORKDIRS:
        return "is a whole top-level directory (use a folder in it)"
    return None


class NetworkSpec(StrictModel):
    """What a session may reach besides its gateway channel (docs/threat-model.md, Egress).

    `none` (default): the sealed session, no network at all. `public`: anything but the
    deployment's blocked networks (loopback, private, link-local, metadata...). `allowlist`:
    only `allowed_hosts` (host names, `*.domain` wildcards, IP addresses or CIDR networks,
    each with an optional `:port`). Either is served by the worker's egress proxy
    (activities/runtimes/network/egress.py) and only where the deployment turns it on
    (`POLAR_EGRESS=proxy`); elsewhere the session is refused at its start.
    """

    mode: Literal["none", "public", "allowlist"] = "none"
    allowed_hosts: list[str] = Field(default_factory=list, max_length=256)

    @field_validator("allowed_hosts")
    @classmethod
    def _valid_hosts(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(normalize_allowed_host(entry) for entry in v))

    @model_validator(mode="after")
    def _hosts_for_allowlist(self) -> NetworkSpec:
        if self.allowed_hosts and self.mode != "allowlist":
            raise ValueError(f"allowed_hosts is for mode 'allowlist', not {self.mode!r}")
        return self

    @property
    def sealed(self) -> bool:
        """No network at all: nothing to open."""
        return self.mode == "none"


class RuntimeSpec(StrictModel):
    """Where a session runs.

    `local`: a trusted, dev-only work dir on the worker host, the harness as an
    unprivileged user in its own PID and network namespaces (zero setup, default).
    `docker`: one container per session from `image` (built locally, see
    infra/images/build.py), the source in /workspace, no network (its only way
    out is the session's gateway channel), CPU, memory, pids and disk limits by
    default, and a wall-clock budget after which the container stops.
    `podman`: the same container sessions with the daemonless `podman` CLI,
    rootless where the host allows (activities/runtimes/kinds/podman.py).
    `auto`: the best this worker's host offers, probed once per worker: docker where an
    engine answers, else podman where it can run as the worker, else `local` (sealed by
    bubblewrap on a worker that is not root; activities/runtimes/selection.py).
    `prepare` actions run after the source is in place, in every kind.
    """

    kind: Literal["local", "docker", "podman", "auto"] = "local"
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
    workdir: str = Field(
        default=DEFAULT_WORKDIR,
        # left out at the default: older workers read the spec
        exclude_if=lambda v: v == DEFAULT_WORKDIR,
        description="containers: the workspace's absolute path in the container (the source "
        "goes there, the harness runs there, its changes there are graded); not `/` nor a "
        "system directory",
    )
    network: NetworkSpec = Field(
        default_factory=NetworkSpec,
        # left out while sealed: older workers read the spec
        exclude_if=lambda v: v.sealed,
        description="what the session may reach besides the gateway (default: nothing); "
        "`public` and `allowlist` need a worker with POLAR_EGRESS=proxy",
    )

    @field_validator("memory", "disk")
    @classmethod
    def _sane_size(cls, v: str | None) -> str | None:
        if v is not None and not MIN_SIZE <= parse_size(v) <= MAX_SIZE:
            raise ValueError(f"{v!r} is not between 16m and {MAX_SIZE >> 30}g")
        return v

    @field_validator("workdir")
    @classmethod
    def _allowed_workdir(cls, v: str) -> str:
        problem = workdir_problem(v)
        if problem is not None:
            raise ValueError(f"workdir {v!r:.80} {problem}")
        return v

    @model_validator(mode="after")
    def _workdir_for_containers(self) -> RuntimeSpec:
        if self.kind == "local" and self.workdir != DEFAULT_WORKDIR:
            raise ValueError(
                f"workdir {self.workdir!r} is for container runtimes (docker, podman): a "
                "'local' session's workspace is a fresh dir on the worker host"
            )
        return self


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
    unknown_models: Literal["policy", "refuse"] = Field(
        default="policy",
        description="a call naming a model that is neither `model`, the gateway's own nor one "
        "of its pools': served by the policy (`policy`), or answered 404 `model_not_found` in "
        "the caller's shape (`refuse`)",
    )

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


class RubricSpec(StrictModel):
    """A judge model's score of the finished session, combined with the outcome evaluator's
    reward (activities/evaluators/rubric.py; docs/evaluation.md, "Rubric rewards").

    The judge is called through the gateway by `model`, a name a named pool serves
    (`POLAR_POOLS`, e.g. a `judge` pool: recorded, never trained). It reads the task, the
    session's final diff and its messages with `rubric`, and answers a score in [0, 1] and a
    reason. The session reward is `formula` of `outcome` (the outcome evaluator's reward)
    and `rubric` (the score), clamped to `reward_range`. The session's text reaches the judge
    as untrusted data, and only its final verdict scores. A judge call that fails is asked
    again, then a control without the session's text: if the control grades, the session's
    text caused the failure and its reward is 0; if it fails too, the outcome reward is kept.
    The report says which.
    """

    rubric: str = Field(min_length=1, description="what the judge scores the session on")
    model: str = Field(
        default="judge",
        min_length=1,
        description="the model name the judge is called by: one a gateway pool serves, never "
        "the policy's",
    )
    formula: str = Field(
        default="outcome + 0.2 * rubric",
        description="the session reward: numbers, `outcome`, `rubric`, + - * /, parentheses, "
        "min(), max() (polar/rubric.py)",
    )
    per_trace: bool = Field(
        default=False,
        description="also judge each trace on its own messages: its reward is the formula of "
        "its outcome reward and its own score (process-reward style)",
    )
    timeout_s: float = Field(default=120, gt=0, le=3600, allow_inf_nan=False)
    max_tokens: int = Field(default=1024, ge=16, le=65536, description="of the judge's answer")
    max_input_chars: int = Field(
        default=60_000,
        ge=2_000,
        le=4_000_000,
        description="the diff and the messages shown to the judge, head and tail",
    )

    @field_validator("formula")
    @classmethod
    def _known_formula(cls, v: str) -> str:
        try:
            parse_formula(v)
        except FormulaError as exc:
            raise ValueError(str(exc)) from None
        return v.strip()

    @field_validator("model")
    @classmethod
    def _not_the_policy(cls, v: str) -> str:
        if v == "policy":
            raise ValueError(
                "rubric.model 'policy' is the policy's own name: name the judge's pool model "
                "(e.g. 'judge', served by a POLAR_POOLS pool)"
            )
        return v


class SweBenchSpec(StrictModel):
    """A SWE-bench-style instance's grading (activities/evaluators/swebench/).

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


class HarborVerifierSpec(StrictModel):
    """A Harbor task's verifier (polar/tasks/harbor.py, activities/evaluators/harbor.py).

    `tests_dir` (a folder of the worker host) is copied to `/tests` of the evaluator's fresh
    runtime only for grading; `/tests/{test_script}` runs there as `user` (None: the image's
    user) with `env`, within `timeout_s`, and the reward is read only from a `/logs/verifier`
    made fresh for it (`reward.json`, else `reward.txt`).
    """

    task: str = Field(min_length=1, description="the Harbor task's name (for messages)")
    tests_dir: str = Field(min_length=1)
    test_script: str = Field(default="test.sh", pattern=r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
    user: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_-]*$|^[0-9]+$")
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=600, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    network: NetworkSpec = Field(
        default_factory=NetworkSpec,
        exclude_if=lambda v: v.sealed,  # left out while sealed: older workers read the spec
        description="what test.sh may reach (as `runtime.network`; default: nothing)",
    )

    @field_validator("tests_dir")
    @classmethod
    def _allowed_tests_dir(cls, v: str) -> str:
        return checked_host_path(v, "harbor.tests_dir")


class EvaluatorSpec(StrictModel):
    """How a session is scored.

    `command`: exit code 0 means reward 1, else 0; an optional `reward_command` then
    computes the reward (and per-trace rewards) from the command's exit code and the
    session's traces. `swebench`: the instance's tests on the session's patch in a fresh
    runtime (`swebench` required). `harbor`: a Harbor task's `tests/test.sh` in a fresh
    runtime, its reward read from `/logs/verifier` (`harbor` required).
    """

    kind: Literal["command", "swebench", "harbor", "none"] = "none"
    command: str | None = None
    reward_command: str | None = Field(
        default=None,
        description="(command) run after `command` and every process it left is gone, outside "
        "the workspace, with PYTHONSAFEPATH=1: reads POLAR_TRACES_FILE, "
        "POLAR_COMMAND_EXIT_CODE and POLAR_WORKSPACE (the workspace's path), may write "
        "POLAR_REWARD_FILE (JSON: reward, trace_rewards, detail). Only it is told where the "
        "reward goes: the code under test never is",
    )
    swebench: SweBenchSpec | None = None
    # left out of the JSON when unset, so older workers still read every other task
    harbor: HarborVerifierSpec | None = Field(default=None, exclude_if=lambda v: v is None)
    protected: list[str] = Field(
        default_factory=list,
        description="task-owned paths (globs: `*` within a name, `**/` any folders) restored "
        "before grading: the harness's changes to them are dropped from its patch",
    )
    reward_range: tuple[float, float] = Field(
        default=(0.0, 1.0), description="rewards (session and per-trace) are clamped to it"
    )
    rubric: RubricSpec | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # left out unset: older workers read the spec
        description="(command, swebench) a judge's score combined with the outcome reward",
    )

    @model_validator(mode="after")
    def _command_needed(self) -> EvaluatorSpec:
        if self.kind == "command" and not self.command:
            raise ValueError("evaluator kind 'command' needs a non-empty 'command'")
        if self.kind == "swebench" and self.swebench is None:
            raise ValueError("evaluator kind 'swebench' needs its 'swebench' instance fields")
        if (self.kind == "harbor") != (self.harbor is not None):
            raise ValueError("'harbor' goes with evaluator kind 'harbor', and only with it")
        if self.reward_command is not None and self.kind != "command":
            raise ValueError("'reward_command' belongs to evaluator kind 'command'")
        lo, hi = self.reward_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"reward_range must be finite with lo < hi, not {self.reward_range}")
        return self

    @model_validator(mode="after")
    def _rubric_wraps_an_outcome(self) -> EvaluatorSpec:
        if self.rubric is not None and self.kind == "none":
            raise ValueError(
                "'rubric' combines a judge's score with an outcome evaluator's reward: give "
                "an evaluator kind (e.g. command) beside it"
            )
        return self

    def eval_runtime_spec(self, runtime: RuntimeSpec) -> RuntimeSpec:
        """The spec of the evaluator's fresh runtime: the task's, then (swebench) the checkout
        of `base_commit` and the instance's install as prepare actions, so they run while
        the harness does."""
        if self.kind != "swebench" or self.swebench is None:
            return runtime
        base = shlex.quote(self.swebench.base_commit)
        git = "git -c safe.directory=* -c core.hooksPath=/dev/null"
        # rev-list reads the commit after --end-of-options as a revision, never as an option;
        # rev-parse and checkout (no --end-of-options before git 2.44) get its hash
        checkout = (
            f"commit=$({git} rev-list -n 1 --end-of-options {base}^{{commit}} --) && "
            f'{{ [ "$({git} rev-parse HEAD)" = "$commit" ] || {git} checkout --quiet "$commit"; }}'
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

"""What every evaluator shares: the interface, its config model's base, its input and
outcome, its errors, one command in a runtime."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self

from activities import safe_files
from activities.runtimes.base import Runtime
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.evaluation_reports import EvaluationReport
from polar.settings import WorkerSettings, get_settings
from polar.tasks.spec import EvaluatorSpec
from polar.tasks.strict import StrictModel

Tick = Callable[[float], Awaitable[None] | None] | None


# git must not read anything the harness may have left in the repo's config; safe.directory
# because the workspace may belong to another user than the one grading it
GIT = (
    "git -c safe.directory=* -c core.quotepath=false -c core.fsmonitor=false "
    "-c core.hooksPath=/dev/null -c diff.noprefix=false -c diff.mnemonicprefix=false "
    "-c color.ui=false -c maintenance.auto=false -c gc.auto=0"
)
"""Every git call of the evaluators and the baseline: no hooks or fsmonitor, fixed output,
and no `git maintenance run --auto` after a commit (a second git process per baseline)."""
# git stops looking for a repository at the workspace (a workspace without .git must not
# find one in a folder above it)
NO_GIT_ABOVE = 'above=$(pwd -P); above=${above%/*}; export GIT_CEILING_DIRECTORIES="${above:-/}"'


class EvaluatorConfig(StrictModel):
    """The base of an evaluator kind's config model: it validates what the task spec holds
    for the kind, by default the object under the key the kind's name gives
    (`{"kind": "swebench", "swebench": {...}}`)."""

    @classmethod
    def written(cls, spec: EvaluatorSpec) -> dict[str, Any] | None:
        """The kind's config as the spec holds it (None: the spec gives none)."""
        return spec.kind_config()

    @classmethod
    def where(cls, spec: EvaluatorSpec) -> str:
        """Where the spec holds it, for messages (`evaluator.swebench`)."""
        return f"evaluator.{spec.kind}"

    def written_into(self, spec: EvaluatorSpec) -> EvaluatorSpec:
        """`spec` holding this config as the model writes it (defaults filled in): what
        `polar submit` sends, so a spec holds what it held when the core had the model."""
        return spec.model_copy(update={spec.kind: self.model_dump(mode="json")})

    @classmethod
    def of(cls, spec: EvaluatorSpec) -> Self:
        """The kind's config, validated (pydantic's ValidationError where it is invalid)."""
        return cls.model_validate(cls.written(spec) or {})


class EvaluatorError(RuntimeError):
    """The task cannot be graded (its instance or its evaluator is broken, not the session):
    the session fails instead of getting a reward."""


@dataclass
class Evaluation:
    """An evaluator's outcome; `report` (JSON) and `patch` are kept as artifacts."""

    reward: float
    detail: str
    trace_rewards: dict[str, float] = field(default_factory=dict)
    report: EvaluationReport = field(default_factory=EvaluationReport)
    patch: bytes = b""
    components: dict[str, float] = field(default_factory=dict)
    """Named reward components beside `reward` (a Harbor reward.json's numbers)."""


@dataclass(frozen=True)
class EvaluationJob:
    """What an evaluator grades: the session's runtime, the evaluator's fresh one (None for
    an evaluator that needs none), the task's evaluator spec and the time left."""

    session_runtime: Runtime
    session_handle: RuntimeHandle
    eval_runtime: Runtime | None
    eval_handle: RuntimeHandle | None
    spec: EvaluatorSpec
    timeout_s: float
    traces: bytes | None = None
    on_tick: Tick = None
    settings: WorkerSettings = field(default_factory=lambda: get_settings(WorkerSettings))
    """The grading worker's settings (source roots, data dir, limits)."""
    prepare: PrepareRequest | None = None
    """How the fresh runtime was prepared: an evaluator that needs another runtime where the
    code under test never ran (a `reward_command`'s) prepares one alike."""
    put_artifacts: Callable[[], Awaitable[int]] | None = None
    """Puts the graded run's collected artifacts (`RuntimeSpec.collect`) at their source paths
    in the fresh runtime, as data (activities/artifact_placement.py): how many; None: none.
    An evaluator that grades with them (`harbor`) calls it after the session's changes."""
    control: bool = False
    """A control grading of the untouched task (activities/evaluators/control.py): grade in
    full even when there are no changes (an evaluator that stops early on an empty patch
    runs its tests all the same)."""

    def fresh(self) -> tuple[Runtime, RuntimeHandle]:
        """The evaluator's fresh runtime and handle (an evaluator that declares it needs one
        always gets one)."""
        if self.eval_runtime is None or self.eval_handle is None:
            raise EvaluatorError("this evaluator needs a fresh runtime and got none")
        return self.eval_runtime, self.eval_handle


class Evaluator(Protocol):
    """One evaluator kind (`EvaluatorSpec.kind`), registered in activities/evaluators."""

    kind: ClassVar[str]
    needs_fresh_runtime: ClassVar[bool]
    """Grades in a runtime prepared afresh from the task's source (the workflow prewarms it
    while the harness runs), never in the session's own."""
    needs_traces: ClassVar[bool]
    """Reads the session's traces (the activity loads them from S3 first)."""
    report_model: ClassVar[type[EvaluationReport]]
    """The model of the report it writes (`{kind}-report.json`)."""
    config_model: ClassVar[type[EvaluatorConfig]]
    """The model of its config, checked at submit and by the worker before it grades."""

    async def evaluate(self, job: EvaluationJob) -> Evaluation:
        """Grade the session; raises EvaluatorError where the task cannot be graded."""
        ...

    def logs(self, job: EvaluationJob, evaluation: Evaluation) -> dict[str, bytes]:
        """The logs kept as artifacts (name -> content), the session's evaluation log first;
        read before the fresh runtime is torn down. `evaluation` may be the one the activity
        made of an EvaluatorError."""
        ...


async def run_in(
    runtime: Runtime,
    handle: RuntimeHandle,
    command: str,
    log_name: str,
    timeout_s: float,
    on_tick: Tick = None,
    env: dict[str, str] | None = None,
) -> tuple[int | None, bool, str]:
    """(exit code, timed out, stdout+stderr) of one command in a runtime; a command that broke
    a resource limit (e.g. a patch that writes past the disk limit) has no exit code. Each log
    is read within POLAR_MAX_LOG_BYTES (head and tail, the middle dropped with a note)."""
    outcome = await runtime.run(
        handle, command, env=env or {}, log_name=log_name, timeout_s=timeout_s, on_tick=on_tick
    )
    limit = get_settings(WorkerSettings).max_log_bytes
    text = ""
    for path in runtime.log_paths(handle, log_name):
        text += safe_files.read_log_file(path, limit=limit).decode(errors="replace")
    if outcome.limit_exceeded:
        return None, outcome.timed_out, f"{text}\n{outcome.limit_exceeded}"
    return outcome.exit_code, outcome.timed_out, text


async def reap(runtime: Runtime, handle: RuntimeHandle) -> None:
    """Kill what a command left running in the runtime, before reading what it wrote
    (a runtime without `reap` yet is skipped)."""
    kill = getattr(runtime, "reap", None)
    if callable(kill):
        await kill(handle)

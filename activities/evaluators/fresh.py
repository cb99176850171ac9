"""The evaluator's fresh runtime, and the session's changes carried into it.

Every evaluator grades there, never in the session's runtime: a runtime
prepared from the task's source (same spec, id `{session}-eval`, plus the
evaluator's own install), with its baseline recorded, into which the
session's changes (a binary diff of its workspace against its baseline,
junk and task-owned files left out) are applied.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from activities.evaluators.base import Evaluation, Tick
from activities.evaluators.baseline import record_baseline
from activities.evaluators.patches import ExtractionFailed, drop_protected, extract_patch
from activities.evaluators.worker_git import WorkerGitFailed
from activities.evaluators.workspace_git import WorkspaceGit, workspace_git
from activities.heartbeat import heartbeating
from activities.runtimes.base import Runtime
from activities.runtimes.network.egress import with_local_hosts
from polar.contracts import EvaluateRequest, PrepareRequest, RuntimeHandle
from polar.evaluation_reports import ApplyAttempt, EvaluationReport
from polar.tasks.spec import EvaluatorSpec, RuntimeSpec, Source


@contextlib.asynccontextmanager
async def fresh_runtime(
    runtime: Runtime,
    request: PrepareRequest,
    prewarmed: RuntimeHandle | None = None,
    on_tick: Tick = None,
) -> AsyncIterator[RuntimeHandle]:
    """A runtime prepared for the evaluator, its baseline recorded (or the `prewarmed` one,
    prepared earlier for `request`), torn down whatever happens."""
    handle: RuntimeHandle | None = prewarmed
    try:
        if handle is None:  # a cold clone or image start can take minutes: keep beating
            handle = await heartbeating(
                runtime.prepare(request), step="preparing the evaluator runtime"
            )
            handle = with_local_hosts(handle, request.runtime)
        if handle.baseline is None:
            handle = await record_baseline(runtime, handle, on_tick=on_tick)
        yield handle
    finally:
        await runtime.teardown(
            handle
            or RuntimeHandle(kind=runtime.kind, session_id=request.session_id, workdir="", host="")
        )


def eval_prepare_request(
    session_id: str,
    task_id: str,
    source: Source | None,
    runtime_spec: RuntimeSpec | None,
    kind: str,
    evaluator: EvaluatorSpec | None = None,
) -> PrepareRequest:
    """The PrepareRequest of a session's evaluator runtime (same source, `-eval` id, the
    evaluator's install as a last prepare action)."""
    spec = runtime_spec or RuntimeSpec.model_validate({"kind": kind})
    if evaluator is not None:
        spec = evaluator.eval_runtime_spec(spec)
    return PrepareRequest(
        session_id=f"{session_id}-eval", task_id=task_id, runtime=spec, source=source
    )


def evaluate_prepare_request(request: EvaluateRequest) -> PrepareRequest:
    """`eval_prepare_request` for the session an `evaluate` call grades."""
    return eval_prepare_request(
        request.session_id,
        request.task_id,
        request.source,
        request.runtime_spec,
        request.runtime.kind,
        request.evaluator,
    )


@dataclass
class Changes:
    """The session's changes and what became of them in the fresh runtime."""

    patch: bytes = b""
    files: list[str] = field(default_factory=list)
    dropped_junk: list[str] = field(default_factory=list)
    protected_dropped: list[str] = field(default_factory=list)
    extract_error: str | None = None
    too_large: str | None = None
    """Why the changes were not even tried in the fresh runtime (larger than its disk)."""
    strategy: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    kept_out: bool = False
    """Recorded and never applied, by design (Harbor's separate verifier)."""

    @property
    def empty(self) -> bool:
        return not self.patch.strip()

    @property
    def applied(self) -> bool:
        """Whether grading can go on: read, and applied (or empty, or kept out by design)."""
        done = self.empty or self.strategy is not None or self.kept_out
        return self.extract_error is None and done

    def extract_problem(self) -> str | None:
        """Why the session's changes could not be read, or None."""
        if self.extract_error is None:
            return None
        return (
            "the session's changes could not be read from its workspace (was its git "
            f"removed or broken?): {self.extract_error[:300]}"
        )

    def unusable(self) -> str | None:
        """Why the changes cannot be graded (unreadable, or applied by no strategy), or None."""
        if not self.applied:
            return (
                self.extract_problem()
                or self.too_large
                or (
                    "the session's changes did not apply in a fresh runtime "
                    f"({len(self.attempts)} strategies tried)"
                )
            )
        return None

    def evaluation(self, report: EvaluationReport) -> Evaluation:
        """A zero-reward Evaluation of these changes, `report` filled; its detail says why they
        cannot be graded (empty: they can, see `applied`)."""
        self.fill(report)
        return Evaluation(0.0, self.unusable() or "", report=report, patch=self.patch)

    def fill(self, report: EvaluationReport) -> None:
        """Write what became of the changes into `report`."""
        report.patch_files = list(self.files)
        report.dropped_files = list(self.dropped_junk)
        report.protected_files_dropped = list(self.protected_dropped)
        report.patch_bytes = len(self.patch)
        report.empty_patch = self.extract_error is None and self.empty
        report.extract_error = self.extract_error
        report.patch_applied = self.strategy is not None
        report.patch_apply_failed = not self.empty and self.strategy is None and not self.kept_out
        report.apply_strategy = self.strategy
        report.apply_attempts = [
            ApplyAttempt(strategy=a["strategy"], exit_code=a["exit_code"]) for a in self.attempts
        ]


async def carry_changes(
    session_runtime: Runtime,
    session_handle: RuntimeHandle,
    base: str,
    eval_runtime: Runtime,
    eval_handle: RuntimeHandle,
    *,
    protected: Sequence[str] = (),
    exclude: Sequence[str] = (),
    named: Callable[[list[str]], Awaitable[Sequence[str]]] | None = None,
    git: WorkspaceGit | None = None,
    timeout_s: float = 300,
    on_tick: Tick = None,
    apply: bool = True,
) -> Changes:
    """Extract the session's changes against `base`, drop the protected files (`protected`,
    and what `named` adds given the patch's files), apply the rest in the evaluator's
    runtime (reset to its baseline if they do not apply) with its `git` (one of its own
    where None: activities/evaluators/workspace_git.py). With `apply` False they are only
    recorded (`Changes.kept_out`: Harbor's separate verifier never sees them)."""
    changes = Changes()
    try:
        patch, files, changes.dropped_junk = await extract_patch(
            session_runtime,
            session_handle,
            base,
            timeout_s=timeout_s,
            exclude=exclude,
            on_tick=on_tick,
        )
    except ExtractionFailed as exc:
        changes.extract_error = str(exc)
        return changes
    if not apply:
        changes.patch, changes.files, changes.protected_dropped = drop_protected(patch, protected)
        changes.kept_out = True
        return changes
    async with contextlib.AsyncExitStack() as stack:
        if git is None:  # a copy of a container's workspace is made only where it is used
            git = await stack.enter_async_context(workspace_git(eval_runtime, eval_handle))
        return await _apply(
            changes,
            patch,
            files,
            eval_runtime,
            eval_handle,
            git,
            protected,
            named,
            timeout_s,
            on_tick,
        )


async def _apply(
    changes: Changes,
    patch: bytes,
    files: list[str],
    eval_runtime: Runtime,
    eval_handle: RuntimeHandle,
    git: WorkspaceGit,
    protected: Sequence[str],
    named: Callable[[list[str]], Awaitable[Sequence[str]]] | None,
    timeout_s: float,
    on_tick: Tick,
) -> Changes:
    """`carry_changes` once the patch is extracted."""
    if named is not None and files:
        protected = [*protected, *await named(files)]
    changes.patch, changes.files, changes.protected_dropped = drop_protected(patch, protected)
    if changes.empty:
        return changes
    limit = await eval_runtime.disk_limit(eval_handle)
    if len(changes.patch) >= limit:  # it could not even be copied in (podman cp fails)
        changes.too_large = (
            f"the session's patch ({len(changes.patch)} bytes) is larger than the runtime's "
            f"disk limit ({limit} bytes): it cannot be applied there"
        )
        return changes
    try:
        changes.strategy, changes.attempts = await git.apply(
            changes.patch,
            name="model",
            reset_to=eval_handle.baseline or "HEAD",
            timeout_s=timeout_s,
            on_tick=on_tick,
        )
    except WorkerGitFailed as exc:  # the worker's git cannot use the copy's .git
        changes.attempts = [{"strategy": "git apply", "exit_code": None, "log": str(exc)}]
    return changes

"""The `swebench` evaluator, step by step: check the workspace, harden the runtime, carry the
session's patch in, apply the test patch, run the tests under Polar's runner, grade them."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from typing import ClassVar

from activities import safe_files
from activities.evaluators.base import (
    Evaluation,
    EvaluationJob,
    EvaluatorConfig,
    EvaluatorError,
    Tick,
    reap,
    run_in,
)
from activities.evaluators.fresh import Changes, carry_changes
from activities.evaluators.patches import APPLY_STRATEGIES, checked_base_commit, patch_files
from activities.evaluators.swebench.commands import (
    build_test_command,
    check_workspace_command,
    plain_pytest_argv,
    runner_command,
)
from activities.evaluators.swebench.config import SweBenchConfig
from activities.evaluators.swebench.grading import SweEvaluation, short_list, verdict
from activities.evaluators.swebench.hardening import (
    GRADING_DIR,
    ModuleMap,
    drop_shadowing,
    install_grading_files,
    probe_modules,
    protected_paths,
    restore_pytest_sections,
)
from activities.evaluators.swebench.logs import SuiteOutcome, read_test_status
from activities.evaluators.swebench.report import SweBenchReport
from activities.evaluators.workspace_git import WorkspaceGit, workspace_git
from activities.runtimes.base import Runtime
from polar.contracts import RuntimeHandle
from polar.evaluation_reports import EvaluationReport

__all__ = ["SweBenchEvaluator", "evaluate_swebench"]


class _Clock:
    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.deadline = time.monotonic() + budget_s

    def left(self, floor: float = 1.0) -> float:
        return max(floor, self.deadline - time.monotonic())


async def _check_workspace(git: WorkspaceGit, spec: SweBenchConfig) -> None:
    """The evaluator's workspace is a git checkout holding `base_commit` (prepare checked it
    out, before the install); EvaluatorError where it is not."""
    check = check_workspace_command(spec.base_commit)
    code, log = await git.read_only(check, "swebench-base", 60)
    if code != 0:
        raise EvaluatorError(
            f"the evaluator's workspace is not a git checkout with {spec.base_commit}: "
            f"{log.strip()[-1000:]}"
        )


async def _reset_test_files(git: WorkspaceGit, spec: SweBenchConfig) -> None:
    """Put the files the test patch touches back to `base_commit`; files it creates are
    removed first."""
    files = patch_files(spec.test_patch)
    if not files:
        return
    code, log = await git.restore(spec.base_commit, files, "swebench-reset-tests", 120)
    if code != 0:
        raise EvaluatorError(f"cannot reset the test files: {log.strip()}")


async def _prepare(
    runtime: Runtime, handle: RuntimeHandle, git: WorkspaceGit, spec: SweBenchConfig
) -> ModuleMap | None:
    """Before the patch: check the workspace, and (unless in trusting mode) that the test
    command is plain pytest, put the runner and plugin in scratch and probe the runtime's
    importable modules (None in trusting mode)."""
    await _check_workspace(git, spec)
    if spec.log_parser:
        return None
    argv = plain_pytest_argv(build_test_command(spec))
    if argv is None:
        raise EvaluatorError(
            f"test_cmd {spec.test_cmd!r} is not a plain pytest invocation (`pytest "
            "...` or `python -m pytest ...`, after optional NAME=value assignments, no "
            "other shell syntax): Polar's runner cannot vouch for its results; set "
            "log_parser to grade its log (the trusting mode)"
        )
    folder = install_grading_files(runtime, handle)
    return await probe_modules(runtime, handle, git, folder, argv)


def _unusable_changes(changes: Changes, report: SweBenchReport, control: bool) -> str | None:
    """The detail where the session's changes end the grading before the tests (unreadable,
    an empty patch outside a control grading, a patch that did not apply); None otherwise."""
    unreadable = changes.extract_problem()
    if unreadable is not None:
        return unreadable
    if changes.empty and not control:
        report.empty_patch = True
        kept = changes.protected_dropped
        why = f" (changes to protected files dropped: {short_list(kept)})" if kept else ""
        return f"empty patch: the session changed nothing (junk aside){why}"
    if changes.strategy is None and not changes.empty:
        report.apply_log = changes.attempts[-1]["log"] if changes.attempts else ""
        return (
            changes.too_large or f"patch did not apply ({len(changes.attempts)} strategies tried)"
        )
    return None


async def _harden(
    git: WorkspaceGit,
    handle: RuntimeHandle,
    files: Sequence[str],
    modules: ModuleMap | None,
    report: SweBenchReport,
) -> None:
    """After the patch: put back the pytest sections it changed and drop its files that
    shadow an importable module, each listed in the report's `protected_files_dropped`."""
    base = handle.baseline or "HEAD"
    report.protected_files_dropped += await restore_pytest_sections(git, base, files)
    if modules is not None:
        report.protected_files_dropped += await drop_shadowing(git, files, modules)


async def _apply_test_patch(
    git: WorkspaceGit, handle: RuntimeHandle, spec: SweBenchConfig, clock: _Clock
) -> None:
    """Reset the test patch's files to `base_commit` and apply the test patch; EvaluatorError
    where it does not apply."""
    await _reset_test_files(git, spec)
    test_strategy, test_attempts = await git.apply(
        spec.test_patch.encode(),
        name="test",
        timeout_s=clock.left(),
        strategies=APPLY_STRATEGIES[:1],
        reset_to=handle.baseline or "HEAD",
    )
    if test_strategy is None:
        raise EvaluatorError(f"the test patch does not apply: {test_attempts[-1]['log']}")


async def evaluate_swebench(
    session_runtime: Runtime,
    session_handle: RuntimeHandle,
    eval_runtime: Runtime,
    eval_handle: RuntimeHandle,
    spec: SweBenchConfig,
    *,
    timeout_s: float,
    protected: Sequence[str] = (),
    on_tick: Tick = None,
    control: bool = False,
) -> SweEvaluation:
    """Grade the session's workspace in the (fresh, prepared) evaluator runtime; the
    non-retryable EvaluatorError for a `base_commit` git would read as an option. A
    `control` grading runs the tests even on an empty patch."""
    checked_base_commit(spec.base_commit)
    clock = _Clock(timeout_s)
    started = time.monotonic()
    report = SweBenchReport(
        instance_id=spec.instance_id,
        results_from=f"log parser {spec.log_parser}" if spec.log_parser else "pytest plugin",
    )
    result = SweEvaluation(0.0, "", report=report)

    def done(detail: str) -> SweEvaluation:
        report.duration_s = round(time.monotonic() - started, 3)
        result.detail = detail
        return result

    try:
        # the workspace's git: the runtime's, or the worker's on one copy of a container's
        async with workspace_git(eval_runtime, eval_handle) as git:
            modules = await _prepare(eval_runtime, eval_handle, git, spec)
            changes = await carry_changes(
                session_runtime,
                session_handle,
                spec.base_commit,
                eval_runtime,
                eval_handle,
                protected=protected_paths(spec, protected),
                exclude=spec.exclude,
                git=git,
                timeout_s=clock.left(),
                on_tick=on_tick,
            )
            result.patch = changes.patch
            changes.fill(report)
            unusable = _unusable_changes(changes, report, control)
            if unusable is not None:
                return done(unusable)
            await _harden(git, eval_handle, changes.files, modules, report)
            if spec.test_patch.strip():
                await _apply_test_patch(git, eval_handle, spec, clock)
        return await _run_tests(eval_runtime, eval_handle, spec, clock, result, done, on_tick)
    except EvaluatorError as exc:
        report.evaluator_error = str(exc)
        return done(f"evaluator error: {str(exc)[:500]}")


async def _run_test_command(
    runtime: Runtime,
    handle: RuntimeHandle,
    spec: SweBenchConfig,
    clock: _Clock,
    result: SweEvaluation,
    on_tick: Tick,
) -> SuiteOutcome:
    """Run the test command (under Polar's runner, with a fresh key, unless in trusting
    mode), kill what it left, and read what its tests reported."""
    report = result.report
    command = build_test_command(spec)
    report.test_command = command
    scratch = runtime.scratch(handle)
    key_file, results_file = f"{GRADING_DIR}/key", f"{GRADING_DIR}/results.json"
    key = b""
    if not spec.log_parser:
        argv = plain_pytest_argv(command)
        assert argv is not None  # checked before the patch was applied
        key = secrets.token_hex(32).encode()
        safe_files.remove(scratch, results_file)
        safe_files.write_bytes(scratch, key_file, key, mode=0o600)
        command = runner_command(scratch / GRADING_DIR, argv)
    code, timed_out, log = await run_in(
        runtime, handle, command, "swebench-tests", clock.left(), on_tick
    )
    await reap(runtime, handle)
    result.test_log = log.encode()
    report.tests_exit_code = code
    outcome = SuiteOutcome(code, timed_out, log)
    read_test_status(scratch, spec, outcome, key, (key_file, results_file), report)
    return outcome


async def _run_tests(
    runtime: Runtime,
    handle: RuntimeHandle,
    spec: SweBenchConfig,
    clock: _Clock,
    result: SweEvaluation,
    done: Callable[[str], SweEvaluation],
    on_tick: Tick,
) -> SweEvaluation:
    """Run the tests, kill what they left, grade what pytest (or the log parser) reported."""
    outcome = await _run_test_command(runtime, handle, spec, clock, result, on_tick)
    return done(verdict(spec, result, outcome, clock.budget_s))


class SweBenchEvaluator:
    """`kind: swebench`: the instance's tests on the session's patch in a fresh runtime."""

    kind: ClassVar[str] = "swebench"
    needs_fresh_runtime: ClassVar[bool] = True
    needs_traces: ClassVar[bool] = False
    report_model: ClassVar[type[EvaluationReport]] = SweBenchReport
    config_model: ClassVar[type[EvaluatorConfig]] = SweBenchConfig

    async def evaluate(self, job: EvaluationJob) -> Evaluation:
        eval_runtime, eval_handle = job.fresh()
        return await evaluate_swebench(
            job.session_runtime,
            job.session_handle,
            eval_runtime,
            eval_handle,
            SweBenchConfig.of(job.spec),
            timeout_s=job.timeout_s,
            protected=job.spec.protected,
            on_tick=job.on_tick,
            control=job.control,
        )

    def logs(self, job: EvaluationJob, evaluation: Evaluation) -> dict[str, bytes]:
        """The test command's log (empty where the tests never ran)."""
        log = evaluation.test_log if isinstance(evaluation, SweEvaluation) else b""
        return {"swebench-tests.log": log}

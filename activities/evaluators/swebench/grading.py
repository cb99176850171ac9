"""The swebench evaluator's grading: SWE-bench's FAIL_TO_PASS / PASS_TO_PASS report of what the
tests reported, the checks that a passing run counts, and the verdict in the report."""

from __future__ import annotations

from dataclasses import dataclass, field

from activities.evaluators.base import Evaluation, EvaluatorError
from activities.evaluators.statuses import PytestRun
from activities.evaluators.swebench.config import SweBenchConfig
from activities.evaluators.swebench.logs import SuiteOutcome, parser_hint
from activities.evaluators.swebench.report import SweBenchReport, TestOutcomes

__all__ = [
    "SweEvaluation",
    "grade",
    "inconsistency",
    "is_resolved",
    "reported_graded_tests",
    "short_list",
    "verdict",
]


@dataclass
class SweEvaluation(Evaluation):
    """The outcome, its JSON report, and the files worth keeping as artifacts."""

    report: SweBenchReport = field(default_factory=SweBenchReport)
    test_log: bytes = b""


def grade(status: dict[str, str], spec: SweBenchConfig) -> dict[str, dict[str, list[str]]]:
    """{FAIL_TO_PASS: {success, failure}, PASS_TO_PASS: {success, failure}} as SWE-bench."""
    from swebench.harness.grading import get_eval_tests_report

    report = get_eval_tests_report(
        status, {"FAIL_TO_PASS": spec.fail_to_pass, "PASS_TO_PASS": spec.pass_to_pass}
    )
    return {k: report[k] for k in ("FAIL_TO_PASS", "PASS_TO_PASS")}


def is_resolved(tests: dict[str, dict[str, list[str]]], spec: SweBenchConfig) -> bool:
    f2p, p2p = tests["FAIL_TO_PASS"], tests["PASS_TO_PASS"]
    return (
        not f2p["failure"]
        and len(f2p["success"]) == len(spec.fail_to_pass)
        and not p2p["failure"]
        and len(p2p["success"]) == len(spec.pass_to_pass)
    )


def reported_graded_tests(status: dict[str, str], spec: SweBenchConfig) -> list[str]:
    """The FAIL_TO_PASS / PASS_TO_PASS tests the run reported at all."""
    try:
        from swebench.harness.grading import _resolve_case
    except ImportError:  # older swebench: exact ids

        def _resolve_case(case: str, sm: dict[str, str]) -> str | None:
            return case if case in sm else None

    graded = [*spec.fail_to_pass, *spec.pass_to_pass]
    return [t for t in graded if _resolve_case(t, status) is not None]


def inconsistency(code: int | None, run: PytestRun | None) -> str | None:
    """Why a run whose graded tests all passed still does not count, or None."""
    if code not in (0, 1):
        return f"every graded test passed, but the test command exited {code}"
    if run is None:
        return None
    if run.overflow:
        return "pytest's reports passed the size limit of the runner's channel"
    if run.returncode is not None:
        if code != run.returncode:
            return f"the test command exited {code} but pytest's process exited {run.returncode}"
        if run.started != 1 or run.finished != 1:
            return (
                f"the runner's pytest started {run.started} and finished {run.finished} "
                "sessions (one expected)"
            )
        if run.exit_statuses and run.exit_statuses[-1] != run.returncode:
            return (
                f"pytest's session ended with exit status {run.exit_statuses[-1]} but its "
                f"process exited {run.returncode}"
            )
    if not run.complete:
        return "a pytest session did not finish (the test process died or was stopped)"
    if any(status not in (0, 1) for status in run.exit_statuses):
        return f"pytest ended with exit status {run.exit_statuses}"
    if code == 1 and not run.any_failure:
        return "the test command exited 1 but pytest reported no failure"
    if code == 0 and run.any_failure:
        return "the test command exited 0 although pytest reported failures"
    return None


def short_list(tests: list[str], limit: int = 5) -> str:
    """Test ids for a one-line detail (the report has them all)."""
    more = f" (+{len(tests) - limit} more)" if len(tests) > limit else ""
    return ", ".join(tests[:limit]) + more


def verdict(
    spec: SweBenchConfig, result: SweEvaluation, outcome: SuiteOutcome, budget_s: float
) -> str:
    """The detail of a finished test run, with its grading in the report and its reward in
    `result` (1 where resolved); EvaluatorError where the run shows the runner or the
    instance broken."""
    report = result.report
    tests = grade(outcome.status, spec)
    report.test_status = outcome.status
    report.fail_to_pass = TestOutcomes.model_validate(tests["FAIL_TO_PASS"])
    report.pass_to_pass = TestOutcomes.model_validate(tests["PASS_TO_PASS"])
    if outcome.timed_out:
        report.tests_timed_out = True
        return f"tests timed out (evaluation budget {budget_s:.0f}s)"
    if outcome.problem is not None:
        return f"not resolved: the test results do not count: {outcome.problem}"
    refused = _refused_run(spec, outcome, report)
    if refused is not None:
        return refused
    if not reported_graded_tests(outcome.status, spec):
        return _nothing_graded(spec, outcome)
    if is_resolved(tests, spec):
        return _resolved(spec, result, outcome)
    failed = [
        f"{kind} failed: {short_list(tests[kind]['failure'])}"
        for kind in ("FAIL_TO_PASS", "PASS_TO_PASS")
        if tests[kind]["failure"]
    ]
    return "not resolved: " + ("; ".join(failed) or "graded tests skipped")


def _refused_run(spec: SweBenchConfig, outcome: SuiteOutcome, report: SweBenchReport) -> str | None:
    """The detail where the runner's run was tampered with; EvaluatorError where its results
    vouch for nothing (a dumpable runner) or pytest never started with Polar's plugin."""
    run = outcome.run
    if run is None:
        return None
    if run.non_dumpable is not True:
        # the code under test could have read the key from the runner's memory (/proc/PID/mem,
        # ptrace): its signed results vouch for nothing, whatever they say
        raise EvaluatorError(
            "Polar's pytest runner could not make itself non-dumpable (prctl "
            f"PR_SET_DUMPABLE: {run.non_dumpable}; no ctypes or no prctl in the runtime's "
            "python3?): the code under test could have read its key, so its results do not "
            "count"
        )
    if run.tampered:
        report.inconsistent = f"tampered: {run.tampered[0]}"
        return f"not resolved: the test run was tampered with: {short_list(run.tampered, 2)}"
    if not (run.booted and run.started):
        raise EvaluatorError(
            f"the test command never started pytest with Polar's results plugin (exit code "
            f"{outcome.code}){parser_hint(spec)}: {outcome.log.strip()[-500:]}"
        )
    return None


def _nothing_graded(spec: SweBenchConfig, outcome: SuiteOutcome) -> str:
    """The detail where no graded test was reported because the tests did not run;
    EvaluatorError where they ran: the instance's test ids do not match its tests."""
    run, code, status = outcome.run, outcome.code, outcome.status
    if run is not None and (run.collect_problems or not run.complete):
        why = short_list(list(run.collect_problems)) if run.collect_problems else "none"
        return (
            f"not resolved: the graded tests did not run (collection problems: {why}; "
            f"pytest sessions started {run.started}, finished {run.finished}; exit {code})"
        )
    if spec.log_parser and code not in (0, 1):
        return f"not resolved: no graded test reported, the tests exited {code}"
    shown = short_list(sorted(status)) if status else "no tests at all"
    raise EvaluatorError(
        f"none of the {len(spec.fail_to_pass)} FAIL_TO_PASS / {len(spec.pass_to_pass)} "
        f"PASS_TO_PASS tests was reported by the test run (reported: {shown}); the "
        f"instance's test ids or test command do not match its tests"
        + (parser_hint(spec) if not spec.log_parser else "")
    )


def _resolved(spec: SweBenchConfig, result: SweEvaluation, outcome: SuiteOutcome) -> str:
    """Every graded test passed: reward 1 unless the run is inconsistent."""
    report = result.report
    problem = inconsistency(outcome.code, outcome.run)
    if problem is not None:
        report.inconsistent = problem
        return f"not resolved: {problem}"
    report.resolved, report.reward = True, 1.0
    result.reward = 1.0
    return (
        f"resolved: FAIL_TO_PASS {len(spec.fail_to_pass)}/{len(spec.fail_to_pass)}, "
        f"PASS_TO_PASS {len(spec.pass_to_pass)}/{len(spec.pass_to_pass)}"
    )

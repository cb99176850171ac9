"""The `swebench` evaluator's report (`swebench-report.json`)."""

from __future__ import annotations

from pydantic import Field

from polar.evaluation_reports import EvaluationReport, ReportModel


class TestOutcomes(ReportModel):
    """Graded tests that passed and failed (SWE-bench's `get_eval_tests_report`)."""

    __test__ = False  # not a pytest class

    success: list[str] = Field(default_factory=list)
    failure: list[str] = Field(default_factory=list)


class PytestSessions(ReportModel):
    """pytest sessions the test command started and finished, and their exit statuses."""

    started: int = 0
    finished: int = 0
    exit_statuses: list[int] = Field(default_factory=list)


class SweBenchReport(EvaluationReport):
    """The `swebench` evaluator's report."""

    instance_id: str = ""
    resolved: bool = False
    reward: float = 0.0
    tests_timed_out: bool = False
    test_command: str | None = None
    tests_exit_code: int | None = None
    results_from: str = Field(
        default="pytest plugin", description="'pytest plugin' or 'log parser <name>'"
    )
    fail_to_pass: TestOutcomes = Field(default_factory=TestOutcomes, alias="FAIL_TO_PASS")
    pass_to_pass: TestOutcomes = Field(default_factory=TestOutcomes, alias="PASS_TO_PASS")
    test_status: dict[str, str] = Field(default_factory=dict, description="test id -> status")
    collect_problems: dict[str, str] | None = None
    pytest_sessions: PytestSessions | None = None
    inconsistent: str | None = Field(
        default=None, description="why a run whose graded tests passed does not count"
    )
    results_problem: str | None = Field(
        default=None,
        description="why the runner's signed results do not count (missing, not authentic)",
    )
    tampered: list[str] = Field(
        default_factory=list, description="what the plugin's tamper checks saw"
    )
    runner_non_dumpable: bool | None = Field(
        default=None, description="whether the runner made itself non-dumpable"
    )
    apply_log: str | None = Field(default=None, description="the last failed apply's log")
    duration_s: float | None = None

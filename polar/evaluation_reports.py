"""The reports evaluators write (`{kind}-report.json` among a session's artifacts).

One model per evaluator kind, so a reader (the SDK, a test, a notebook) parses
a stored report with `SweBenchReport.model_validate_json(data)` instead of
guessing at keys. The JSON field names are those reports always had (the
swebench grading keys `FAIL_TO_PASS` / `PASS_TO_PASS` included, as aliases), so
reports stored before these models parse too; every field has a default, and
keys a model does not know are ignored when reading.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ReportModel(BaseModel):
    """Reports are written by name (or alias) and dumped with their JSON names."""

    model_config = ConfigDict(
        validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    def to_json(self) -> bytes:
        """The report as stored in S3 (indented JSON)."""
        return self.model_dump_json(indent=2).encode()


class ControlReport(ReportModel):
    """The control grading of the untouched task (activities/evaluators/control.py): made
    when grading the session failed, to tell the session's fault from the task's."""

    graded: bool = Field(description="the untouched task grades: the failure is the session's")
    detail: str = ""
    failure: str = Field(default="", description="how grading the session failed")


class ApplyAttempt(ReportModel):
    """One way of applying the session's patch that was tried (`git apply`, ...)."""

    strategy: str
    exit_code: int | None = None


class RubricTraceScore(ReportModel):
    """The judge's score of one trace (`rubric.per_trace`), or why it gave none."""

    score: float | None = None
    reason: str | None = None
    judge_error: str | None = None
    reward: float | None = Field(default=None, description="the trace's combined reward")


class RubricReport(ReportModel):
    """A rubric judge's part in the reward (activities/evaluators/rubric.py): the outcome
    evaluator's reward, the judge's score and reason, and the formula's combined reward
    (before `reward_range` clamps it); or why the judge gave no score, the outcome kept."""

    model: str = ""
    formula: str = ""
    outcome: float | None = Field(default=None, description="the outcome evaluator's reward")
    score: float | None = Field(
        default=None, description="the judge's score (per_trace: the mean of the traces')"
    )
    reason: str | None = None
    reward: float | None = Field(default=None, description="the formula's combined reward")
    judge_error: str | None = Field(
        default=None,
        description="why the judge gave no score: the session's zero where a control without "
        "its text was graded, else the outcome reward kept",
    )
    judge_calls: int = 0
    duration_s: float | None = None
    traces: dict[str, RubricTraceScore] = Field(
        default_factory=dict, description="per_trace: trace id -> its score"
    )


class EvaluationReport(ReportModel):
    """What every evaluator reports: the session's changes and what became of them, and what
    the `evaluate` activity adds (errors, clamped rewards, which runtime graded)."""

    patch_files: list[str] = Field(default_factory=list)
    dropped_files: list[str] = Field(default_factory=list, description="junk left out")
    protected_files_dropped: list[str] = Field(default_factory=list)
    patch_bytes: int = 0
    empty_patch: bool = False
    extract_error: str | None = Field(
        default=None, description="why the session's changes could not be read"
    )
    patch_applied: bool = False
    patch_apply_failed: bool = False
    apply_strategy: str | None = None
    apply_attempts: list[ApplyAttempt] = Field(default_factory=list)
    evaluator_error: str | None = Field(
        default=None, description="the task cannot be graded: the session fails"
    )
    invalid_reward: str | None = None
    control: ControlReport | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="the control grading of the untouched task, run when grading failed",
    )
    rewards_clamped: list[str] = Field(default_factory=list)
    eval_runtime: Literal["prewarmed", "fresh"] | None = None
    rubric: RubricReport | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # a report without a rubric dumps as it always did
        description="the rubric judge's score, when the task has a rubric",
    )


class Baselines(ReportModel):
    """The baseline commits of the session's and the evaluator's runtimes (equal when both
    were prepared alike)."""

    session: str | None = None
    eval: str | None = None


class CommandReport(EvaluationReport):
    """The `command` evaluator's report."""

    baselines: Baselines | None = None
    exit_code: int | None = None
    reward_command_exit_code: int | None = None
    reward_file: bool = Field(
        default=False, description="the reward_command wrote POLAR_REWARD_FILE"
    )


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


class HarborReport(EvaluationReport):
    """The `harbor` evaluator's report (a Harbor task's tests/test.sh)."""

    task: str = ""
    baselines: Baselines | None = None
    reward: float | None = None
    reward_file: str | None = Field(default=None, description="'reward.json' or 'reward.txt'")
    components: dict[str, float] = Field(
        default_factory=dict, description="every number reward.json gave, by name"
    )
    test_exit_code: int | None = None
    test_timed_out: bool = False
    verifier_user: str | None = None
    duration_s: float | None = None


REPORTS: dict[str, type[EvaluationReport]] = {
    "command": CommandReport,
    "swebench": SweBenchReport,
    "harbor": HarborReport,
}
"""The report model of each evaluator kind."""


def parse_report(kind: str, data: bytes | str) -> EvaluationReport:
    """A stored `{kind}-report.json`, parsed with its kind's model (ValueError: unknown
    kind, or not a report)."""
    model = REPORTS.get(kind)
    if model is None:
        raise ValueError(f"no report model for evaluator kind {kind!r}")
    return model.model_validate_json(data)

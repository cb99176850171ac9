"""What the reports evaluators write (`{kind}-report.json` among a session's artifacts)
share: the base every kind's report builds on, and the parts the `evaluate` activity adds.

Each evaluator kind's own report model lives in its folder (activities/evaluators/<kind>/
report.py), named by the evaluator's `report_model`; `activities.evaluators.parse_report`
parses a stored report with its kind's model instead of guessing at keys. The JSON field
names are those reports always had, so reports stored before these models parse too; every
field has a default, and keys a model does not know are ignored when reading.
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

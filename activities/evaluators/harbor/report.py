"""The `harbor` evaluator's report (`harbor-report.json`)."""

from __future__ import annotations

from pydantic import Field

from polar.evaluation_reports import Baselines, EvaluationReport


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
    artifacts_placed: int | None = Field(
        default=None,
        description="collected artifacts put at their source paths before test.sh (None: the "
        "task collects none)",
    )
    separate: bool = Field(
        default=False,
        description="Harbor's separate verifier: the session's changes recorded (the patch), "
        "never applied in the verifier's runtime; its collected artifacts are what it gets",
    )

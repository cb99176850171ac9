"""The `command` evaluator's report (`command-report.json`)."""

from __future__ import annotations

from pydantic import Field

from polar.evaluation_reports import Baselines, EvaluationReport


class CommandReport(EvaluationReport):
    """The `command` evaluator's report."""

    baselines: Baselines | None = None
    exit_code: int | None = None
    reward_command_exit_code: int | None = None
    reward_file: bool = Field(
        default=False, description="the reward_command wrote POLAR_REWARD_FILE"
    )

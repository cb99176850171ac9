"""The `harbor` evaluator (evaluator.py), its config (config.py) and report (report.py)."""

from __future__ import annotations

from activities.evaluators.harbor.config import HarborConfig
from activities.evaluators.harbor.evaluator import (
    HarborEvaluator,
    Tampering,
    judge_reward_files,
    parse_reward,
    primary_reward,
)
from activities.evaluators.harbor.report import HarborReport

__all__ = [
    "HarborConfig",
    "HarborEvaluator",
    "HarborReport",
    "Tampering",
    "judge_reward_files",
    "parse_reward",
    "primary_reward",
]

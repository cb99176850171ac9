"""The `command` evaluator (evaluator.py), its config (config.py) and report (report.py)."""

from __future__ import annotations

from activities.evaluators.command.config import CommandConfig
from activities.evaluators.command.evaluator import (
    CommandEvaluator,
    Evaluation,
    InvalidRewardFile,
    evaluate_command,
)
from activities.evaluators.command.report import CommandReport

__all__ = [
    "CommandConfig",
    "CommandEvaluator",
    "CommandReport",
    "Evaluation",
    "InvalidRewardFile",
    "evaluate_command",
]

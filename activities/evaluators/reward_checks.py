"""Rewards are checked: finite, and clamped to the range the task declares.

The one place every evaluator's outcome goes through (the `evaluate`
activity calls `check_rewards`), for the session reward and per-trace
rewards alike. A value that was clamped is said so in the detail.
"""

from __future__ import annotations

import math

from activities.evaluators.base import Evaluation


class InvalidReward(ValueError):
    """An evaluator gave a reward that is not a finite number (NaN, inf)."""


def _fmt(value: float) -> str:
    return f"{value:g}"


def check_rewards(evaluation: Evaluation, reward_range: tuple[float, float]) -> Evaluation:
    """`evaluation` with its rewards checked and clamped into `reward_range` (in place)."""
    lo, hi = reward_range
    if not math.isfinite(evaluation.reward):
        raise InvalidReward(f"the evaluator's reward is not finite: {evaluation.reward!r}")
    bad = {k: v for k, v in evaluation.trace_rewards.items() if not math.isfinite(v)}
    if bad:
        shown = ", ".join(f"{k}: {v!r}" for k, v in list(bad.items())[:5])
        raise InvalidReward(f"per-trace rewards are not finite: {shown}")
    notes = []
    clamped = min(hi, max(lo, evaluation.reward))
    if clamped != evaluation.reward:
        notes.append(f"reward {_fmt(evaluation.reward)} clamped to {_fmt(clamped)}")
        evaluation.reward = clamped
    outside = 0
    for trace_id, value in evaluation.trace_rewards.items():
        within = min(hi, max(lo, value))
        if within != value:
            outside += 1
            evaluation.trace_rewards[trace_id] = within
    if outside:
        notes.append(f"{outside} per-trace reward(s) clamped")
    if notes:
        evaluation.detail += f"; {', '.join(notes)} (reward_range [{_fmt(lo)}, {_fmt(hi)}])"
        evaluation.report.rewards_clamped = notes
    return evaluation

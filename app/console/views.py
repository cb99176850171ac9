"""What the pages show: task rows, session rows, the reward histogram, a group's advantages.

Plain data shaped from Temporal's results and visibility; the templates only lay it out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from app.console.pass_at_k import PassRates, pass_rates
from polar.advantages import group_rewards, session_advantages
from polar.contracts import SessionResult, Stage
from polar.outcomes import count_outcomes
from polar.records import SessionStatus

STAGE_ORDER = [s.value for s in Stage if s not in (Stage.PENDING, Stage.DONE)]
"""The stages a session books time to, in the order they run."""


@dataclass
class TaskRow:
    """One RolloutTask workflow on the tasks page."""

    workflow_id: str
    task_id: str
    harness: str
    runtime: str | None
    status: str
    started: datetime | None
    closed: datetime | None
    wall_s: float | None
    total: int | None = None
    done: int | None = None
    outcome_counts: dict[str, int] = field(default_factory=dict)
    mean_reward: float | None = None
    error: str | None = None
    passes: PassRates | None = None
    trained_tokens: int = 0
    policy_version: int | None = None
    cancelled_sessions: int = 0
    rewarded: int = 0
    """Sessions with a reward (what `mean_reward` averages)."""


def add_results(row: TaskRow, sessions: list[SessionResult], top: float) -> None:
    """A task row's figures from its finished sessions: outcome counts, mean reward, pass@1
    and pass@k (app/console/pass_at_k.py: k is the task's session count), trained tokens."""
    row.outcome_counts, row.mean_reward = summarize_results(sessions)
    row.passes = pass_rates(sessions, top, row.total)
    row.trained_tokens = sum(s.num_response_tokens for s in sessions)
    row.cancelled_sessions = sum(1 for s in sessions if s.status == SessionStatus.CANCELLED)
    row.rewarded = sum(1 for s in sessions if s.reward is not None)


@dataclass
class SessionRow:
    """One session of a task: from its result when it has one, else from visibility."""

    session_id: str
    index: int | None
    status: str
    stage: str | None = None
    outcome: str | None = None
    reason: str | None = None
    reward: float | None = None
    calls: int | None = None
    trained_tokens: int | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    attempts: int = 1
    error: str | None = None
    advantage: float | None = None


def session_row(result: SessionResult) -> SessionRow:
    """The row of a finished session."""
    outcome = result.outcome
    reason = None
    if outcome is not None:
        reason = outcome.label if outcome.reason else (outcome.detail or None)
    return SessionRow(
        session_id=result.session_id,
        index=result.index,
        status=result.status.value,
        stage=Stage.DONE.value,
        outcome=outcome.outcome.value if outcome is not None else None,
        reason=reason,
        reward=result.reward,
        calls=result.num_completions,
        trained_tokens=result.num_response_tokens,
        stage_seconds=dict(result.stage_seconds),
        hosts=list(result.hosts),
        attempts=1 + len(result.infra_attempts),
        error=result.error,
    )


def summarize_results(sessions: list[SessionResult]) -> tuple[dict[str, int], float | None]:
    """Outcome counts and mean reward of finished sessions."""
    counts = count_outcomes([s.outcome for s in sessions])
    rewards = [s.reward for s in sessions if s.reward is not None]
    return counts, (sum(rewards) / len(rewards) if rewards else None)


def with_advantages(
    rows: list[SessionRow], results: list[SessionResult], rule: str = "shrink"
) -> bool:
    """Give each row its group advantage (polar.advantages, under the task's
    `infra_errors.group` rule); whether any session has one."""
    advantages = session_advantages(group_rewards(results, rule))
    for row in rows:
        row.advantage = advantages.get(row.session_id)
    return any(a is not None for a in advantages.values())


@dataclass(frozen=True)
class HistogramBar:
    """One bin of the reward histogram: its range, count and height in percent."""

    low: float
    high: float
    count: int
    percent: int


def reward_histogram(rewards: list[float], bins: int = 10) -> list[HistogramBar]:
    """Rewards in `bins` equal bins between their minimum and maximum (one bin if all equal)."""
    finite = [r for r in rewards if math.isfinite(r)]
    if not finite:
        return []
    low, high = min(finite), max(finite)
    if high == low:
        return [HistogramBar(low, high, len(finite), 100)]
    width = (high - low) / bins
    counts = [0] * bins
    for r in finite:
        counts[min(bins - 1, int((r - low) / width))] += 1
    top = max(counts)
    return [
        HistogramBar(low + k * width, low + (k + 1) * width, c, round(100 * c / top))
        for k, c in enumerate(counts)
    ]


def wall_seconds(started: datetime | None, closed: datetime | None, now: datetime) -> float | None:
    """A workflow's wall time: start to close, or to now while it runs."""
    if started is None:
        return None
    return max(0.0, ((closed or now) - started).total_seconds())

"""The training page's data: tasks a trainer bridge tagged with a policy version, by version.

A bridge stamps `policy_version` on each task it submits (TaskSpec.policy_version: verl,
slime, TRL, NeMo Gym; polar/trainers/). It is no search attribute, so the page reads the
newest RolloutTasks the filters select (their start input holds the version; closed ones
are cached) and groups those that have one. Per version: tasks, sessions, mean reward over
the rewarded sessions, outcome counts, what was dropped (tasks cancelled: a bridge cancels
the prefetched tasks that fell more than `max_staleness` versions behind, or that no batch
asked for; and sessions cancelled inside tasks that stopped early) and trained tokens.
The chart: bars whose heights and widths are CSS classes in 5 % steps (the CSP allows no
inline style, and the console's markup is plain HTML: no SVG); the table has the figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.console.views import TaskRow

STEPS = 20
"""Bar sizes are multiples of 1/STEPS of the largest (classes v0..v20, w0..w20)."""
OUTCOME_ORDER = ("ok", "policy_failure", "timeout", "infra_error", "task_error")


@dataclass
class VersionStats:
    """One policy version's tasks, summed."""

    version: int
    tasks: int = 0
    sessions: int = 0
    rewarded: int = 0
    reward_sum: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    tasks_cancelled: int = 0
    sessions_cancelled: int = 0
    trained_tokens: int = 0
    reward_step: int = 0
    """The mean reward bar's height, in steps of the largest mean."""
    token_step: int = 0
    outcome_steps: list[tuple[str, int, int]] = field(default_factory=list)
    """Each outcome class's count and width in steps of the most sessions of any version."""

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None


def add_row(stats: VersionStats, row: TaskRow) -> None:
    stats.tasks += 1
    stats.sessions += row.done or 0
    if row.mean_reward is not None and row.rewarded:
        stats.rewarded += row.rewarded
        stats.reward_sum += row.mean_reward * row.rewarded
    for name, count in row.outcome_counts.items():
        if ":" not in name:  # the classes; `infra_error:reason` is a part of one
            stats.outcomes[name] = stats.outcomes.get(name, 0) + count
    stats.tasks_cancelled += row.status == "canceled"
    stats.sessions_cancelled += row.cancelled_sessions
    stats.trained_tokens += row.trained_tokens


def step(value: float, top: float) -> int:
    """`value` as a bar size in steps of `top` (a non-zero value shows at least one step)."""
    if top <= 0 or value <= 0:
        return 0
    return max(1, round(STEPS * value / top))


def by_version(rows: list[TaskRow]) -> list[VersionStats]:
    """The tagged tasks' figures per policy version, oldest version first, with bar sizes."""
    found: dict[int, VersionStats] = {}
    for row in rows:
        if row.policy_version is not None:
            add_row(found.setdefault(row.policy_version, VersionStats(row.policy_version)), row)
    versions = [found[v] for v in sorted(found)]
    top_reward = max((abs(v.mean_reward or 0.0) for v in versions), default=0.0)
    top_tokens = max((v.trained_tokens for v in versions), default=0)
    top_sessions = max((sum(v.outcomes.values()) for v in versions), default=0)
    for v in versions:
        v.reward_step = step(v.mean_reward or 0.0, top_reward)
        v.token_step = step(v.trained_tokens, top_tokens)
        named = [o for o in OUTCOME_ORDER if o in v.outcomes] + sorted(
            set(v.outcomes) - set(OUTCOME_ORDER)
        )
        v.outcome_steps = [(o, v.outcomes[o], step(v.outcomes[o], top_sessions)) for o in named]
    return versions

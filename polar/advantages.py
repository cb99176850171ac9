"""GRPO advantages of a group (one task's sessions), per trace, under Polar's reward policies.

A group's advantages are computed from its sessions' outcome rewards, never
from per-trace rewards (under `session_normalized` a trace carries reward / its
session's trace count, so equally successful sessions with different call
counts would otherwise get different advantages):

* A session is scored when its evaluator ran: `completed`, and also
  `harness_failed` and `timeout` (the evaluator graded what the harness left;
  polar/builders/README.md). Its reward joins the group baseline.
* A session without a reward (`error`, `cancelled`, no evaluator) is left out
  of the baseline and its traces get advantage None: it is never counted as 0.
* A session the stack failed (outcome `infra_error`, polar/outcomes.py) is no
  verdict on the policy: `group_rewards` leaves it out as well, and the task's
  `infra_errors.group` rule says what its group does (`wait`/`shrink`: the
  group goes on without it; `drop`: the whole group gets None).
* Session advantage: (reward − group mean) / (group population std + `eps`);
  0.0 for every session when fewer than two are scored.
* Per trace: `broadcast` traces carry their session's advantage;
  `session_normalized` traces carry it divided by the session's trace count,
  so a session's traces together carry its advantage once, as they carry its
  reward once.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence

from polar.contracts import SessionResult
from polar.records import OutcomeClass, Trace

EPS = 1e-6
NO_VERDICT = frozenset({OutcomeClass.INFRA_ERROR, OutcomeClass.TASK_ERROR})
"""Outcome classes that say nothing about the policy: never in a group's baseline."""


def is_verdict(session: SessionResult) -> bool:
    """Whether `session`'s end says something about the policy (not an infra or task error)."""
    outcome = session.outcome
    return outcome is not None and outcome.outcome not in NO_VERDICT


def group_rewards(
    sessions: Sequence[SessionResult], rule: str = "shrink"
) -> dict[str, float | None]:
    """Each session's reward for its group's advantages under the task's `infra_errors.group`
    rule: None for a session that is no verdict (infra or task error, cancelled); under
    `drop`, None for every session of a group that has an `infra_error` one."""
    if rule == "drop" and any(
        s.outcome is not None and s.outcome.outcome == OutcomeClass.INFRA_ERROR for s in sessions
    ):
        return {s.session_id: None for s in sessions}
    return {s.session_id: (s.reward if is_verdict(s) else None) for s in sessions}


def session_reward(trace: Trace) -> float | None:
    """The session's outcome reward, recovered from one of its traces and its policy."""
    if trace.reward is None:
        return None
    if trace.provenance.reward_policy == "session_normalized":
        stats = trace.provenance.reconstruction
        return trace.reward * (stats.chains if stats is not None else 1)
    return trace.reward


def session_advantages(
    rewards: Mapping[str, float | None], eps: float = EPS
) -> dict[str, float | None]:
    """Each session's group-normalised advantage; None for an unscored session."""
    scored = {sid: r for sid, r in rewards.items() if r is not None}
    if len(scored) < 2:
        return {sid: (0.0 if r is not None else None) for sid, r in rewards.items()}
    values = list(scored.values())
    mean, std = statistics.fmean(values), statistics.pstdev(values)
    return {sid: (None if r is None else (r - mean) / (std + eps)) for sid, r in rewards.items()}


def trace_advantages(
    traces: Sequence[Trace],
    rewards: Mapping[str, float | None] | None = None,
    eps: float = EPS,
) -> dict[str, float | None]:
    """Advantage of every trace of one group, by trace id (see the module docstring).

    `rewards`: each session's outcome reward (e.g. from the `TaskResult`);
    default: recovered from the traces. A session listed in `rewards` without
    traces still counts in the baseline.
    """
    recovered: dict[str, float | None] = {}
    for trace in traces:
        recovered.setdefault(trace.provenance.session_id, session_reward(trace))
    by_session = recovered | dict(rewards or {})
    per_session = session_advantages(by_session, eps)
    counts = Counter(t.provenance.session_id for t in traces)
    out: dict[str, float | None] = {}
    for trace in traces:
        sid = trace.provenance.session_id
        advantage = per_session[sid]
        if advantage is not None and trace.provenance.reward_policy == "session_normalized":
            advantage /= counts[sid]
        out[trace.trace_id] = advantage
    return out

"""Group advantages over every session outcome, under both reward policies.

`test_builders_rewards.test_a_mixed_group_gets_the_promised_advantages` covers
completed, timed-out and errored sessions; this adds the other two statuses
(`harness_failed`: graded, so in the baseline; `cancelled`: unscored, so None),
a session that made no model call, and a group with no spread.
"""

from __future__ import annotations

import pytest

from polar.advantages import EPS, trace_advantages
from polar.records import SessionStatus
from tests.unit.polar.builders.test_builders_rewards import scored_group

# (session, status, reward, calls): every terminal status once
EVERY_OUTCOME = [
    ("ok", SessionStatus.COMPLETED, 1.0, 3),
    ("crashed", SessionStatus.HARNESS_FAILED, 0.0, 2),
    ("slow", SessionStatus.TIMEOUT, 1.0, 1),
    ("broken", SessionStatus.ERROR, None, 2),
    ("stopped", SessionStatus.CANCELLED, None, 1),
]


@pytest.mark.parametrize("policy", ["broadcast", "session_normalized"])
def test_every_outcome_gets_the_promised_advantage(policy: str) -> None:
    traces = scored_group(policy, EVERY_OUTCOME)
    # an unscored session's traces carry no reward at all, never 0
    assert all(t.reward is None for t in traces if t.status in ("error", "cancelled"))
    got = trace_advantages(traces)
    # baseline: the three graded sessions (harness_failed and timeout included)
    mean = 2 / 3
    std = ((2 * (1 - mean) ** 2 + mean**2) / 3) ** 0.5
    session = {"ok": (1 - mean) / (std + EPS), "crashed": -mean / (std + EPS)}
    session["slow"] = session["ok"]
    calls = {sid: n for sid, _, _, n in EVERY_OUTCOME}
    for trace in traces:
        sid = trace.provenance.session_id
        if sid in ("broken", "stopped"):
            assert got[trace.trace_id] is None
            continue
        share = calls[sid] if policy == "session_normalized" else 1
        assert got[trace.trace_id] == pytest.approx(session[sid] / share, rel=1e-12)
    # the TaskResult's session rewards give the same answer as the traces' own
    rewards = {sid: r for sid, _, r, _ in EVERY_OUTCOME}
    assert trace_advantages(traces, rewards) == got


@pytest.mark.parametrize("policy", ["broadcast", "session_normalized"])
def test_a_graded_session_without_model_calls_still_sets_the_baseline(policy: str) -> None:
    traces = scored_group(policy, [("ok", SessionStatus.COMPLETED, 1.0, 2)])
    # alone, the one session has no group to be compared with
    assert set(trace_advantages(traces).values()) == {0.0}
    # a timed-out session that never called the model scored 0: ok is above the mean
    got = trace_advantages(traces, {"ok": 1.0, "silent": 0.0})
    share = 2 if policy == "session_normalized" else 1
    assert list(got.values()) == [pytest.approx(0.5 / (0.5 + EPS) / share, rel=1e-12)] * 2


@pytest.mark.parametrize("policy", ["broadcast", "session_normalized"])
def test_a_group_without_spread_has_zero_advantages(policy: str) -> None:
    outcomes = [
        ("a", SessionStatus.COMPLETED, 1.0, 3),
        ("b", SessionStatus.TIMEOUT, 1.0, 1),
        ("c", SessionStatus.ERROR, None, 1),
    ]
    got = trace_advantages(scored_group(policy, outcomes))
    assert sorted({a for a in got.values() if a is not None}) == [0.0]
    assert sum(a is None for a in got.values()) == 1

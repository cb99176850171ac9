"""Data shaping of the task pages: session rows, outcome counts, histogram, advantages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.console.task_page import infra_rule
from app.console.views import (
    reward_histogram,
    session_row,
    summarize_results,
    wall_seconds,
    with_advantages,
)
from polar.contracts import SessionResult
from polar.records import SessionStatus


def result(sid: str, status: SessionStatus, reward: float | None, **kw: object) -> SessionResult:
    return SessionResult.model_validate(
        {
            "session_id": sid,
            "task_id": "t",
            "index": int(sid[1:]),
            "status": status,
            "reward": reward,
            "harness": "command",
            **kw,
        }
    )


SESSIONS = [
    result("s0", SessionStatus.COMPLETED, 1.0, num_completions=3, num_response_tokens=40),
    result("s1", SessionStatus.HARNESS_FAILED, 0.0, harness_started=True),
    result("s2", SessionStatus.ERROR, None, error_type="ClientError", error_stage="build"),
    result("s3", SessionStatus.COMPLETED, 1.0, infra_attempts=["infra_error:storage: x"]),
]


def test_a_session_row_has_its_outcome_reason_and_counts() -> None:
    rows = [session_row(s) for s in SESSIONS]
    assert (rows[0].outcome, rows[0].calls, rows[0].trained_tokens) == ("ok", 3, 40)
    assert (rows[1].outcome, rows[1].reason) == ("policy_failure", "the harness failed")
    assert (rows[2].outcome, rows[2].reason) == ("infra_error", "infra_error:storage")
    assert rows[3].attempts == 2


def test_outcome_counts_and_mean_reward() -> None:
    counts, mean = summarize_results(SESSIONS)
    assert counts == {
        "ok": 2,
        "policy_failure": 1,
        "infra_error": 1,
        "infra_error:storage": 1,
    }
    assert mean == pytest.approx(2 / 3)
    assert summarize_results([]) == ({}, None)


def test_advantages_leave_infra_errors_out() -> None:
    rows = [session_row(s) for s in SESSIONS]
    assert with_advantages(rows, SESSIONS)
    by_id = {r.session_id: r.advantage for r in rows}
    assert by_id["s2"] is None
    assert by_id["s0"] == by_id["s3"] and by_id["s0"] is not None and by_id["s0"] > 0
    assert by_id["s1"] is not None and by_id["s1"] < 0


def test_the_histogram_bins_rewards() -> None:
    bars = reward_histogram([0.0, 0.0, 0.5, 1.0, 1.0, 1.0], bins=4)
    assert [b.count for b in bars] == [2, 0, 1, 3]
    assert [b.percent for b in bars] == [67, 0, 33, 100]
    assert reward_histogram([0.5, 0.5]) == [reward_histogram([0.5])[0].__class__(0.5, 0.5, 2, 100)]
    assert reward_histogram([]) == [] and reward_histogram([float("nan")]) == []


def test_wall_time_runs_to_now_while_open() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    now = start + timedelta(seconds=90)
    assert wall_seconds(start, None, now) == 90.0
    assert wall_seconds(start, start + timedelta(seconds=5), now) == 5.0
    assert wall_seconds(None, None, now) is None


def test_a_task_that_drops_groups_with_an_infra_error_shows_no_advantage() -> None:
    lost = result("s4", SessionStatus.COMPLETED, 1.0, harness_started=False)  # infra_error
    sessions = [*SESSIONS, lost]
    rows = [session_row(s) for s in sessions]
    assert with_advantages(rows, sessions, "shrink")  # the group goes on without it
    assert not with_advantages(rows, sessions, "drop")
    assert all(r.advantage is None for r in rows)


def test_the_rule_is_the_task_s_own() -> None:
    assert infra_rule({"infra_errors": {"group": "drop"}}) == "drop"
    assert infra_rule({"infra_errors": {"group": "odd"}}) == "shrink"
    assert infra_rule({}) == "shrink"

"""The training page's figures: tagged tasks summed per policy version, and bar sizes."""

from __future__ import annotations

import pytest

from app.console.training import STEPS, by_version
from app.console.views import TaskRow


def row(version: int | None, **kw: object) -> TaskRow:
    fields: dict[str, object] = {
        "workflow_id": "w", "task_id": "t", "harness": "command", "runtime": None,
        "status": "completed", "started": None, "closed": None, "wall_s": None,
        "policy_version": version, **kw,
    }  # fmt: skip
    return TaskRow(**fields)  # type: ignore[arg-type]


def test_tagged_tasks_are_summed_per_version_untagged_left_out() -> None:
    rows = [
        row(2, done=2, mean_reward=1.0, rewarded=2, trained_tokens=40,
            outcome_counts={"ok": 2}),
        row(1, done=3, mean_reward=0.0, rewarded=1, trained_tokens=10, cancelled_sessions=2,
            outcome_counts={"policy_failure": 1}),
        row(2, done=4, mean_reward=0.25, rewarded=4, trained_tokens=60,
            outcome_counts={"ok": 1, "policy_failure": 1, "infra_error": 2,
                            "infra_error:storage": 2}),
        row(2, status="canceled", done=0),
        row(None, done=5, mean_reward=1.0, rewarded=5, outcome_counts={"ok": 5}),
    ]  # fmt: skip
    one, two = by_version(rows)
    assert (one.version, one.tasks, one.sessions, one.sessions_cancelled) == (1, 1, 3, 2)
    assert (two.version, two.tasks, two.sessions, two.tasks_cancelled) == (2, 3, 6, 1)
    assert two.mean_reward == pytest.approx((1.0 * 2 + 0.25 * 4) / 6)  # per session
    assert two.outcomes == {"ok": 3, "policy_failure": 1, "infra_error": 2}  # classes only
    assert two.trained_tokens == 100
    assert (one.reward_step, two.reward_step) == (0, STEPS)
    assert (one.token_step, two.token_step) == (2, STEPS)
    assert [name for name, _, _ in two.outcome_steps] == ["ok", "policy_failure", "infra_error"]
    assert two.outcome_steps[0] == ("ok", 3, 10)  # 3 of the 6 sessions of the widest version


def test_no_tagged_task_no_version() -> None:
    assert by_version([row(None), row(None, status="canceled")]) == []

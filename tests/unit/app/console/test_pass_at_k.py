"""pass@k: the unbiased estimator against its closed form, and a task's samples."""

from __future__ import annotations

from math import comb

import pytest

from app.console.pass_at_k import pass_at_k, pass_rates, top_reward
from polar.contracts import SessionResult
from polar.records import SessionStatus


@pytest.mark.parametrize(
    ("n", "c", "k"), [(10, 3, 1), (10, 3, 5), (8, 0, 4), (5, 5, 2), (20, 1, 20), (7, 2, 6)]
)
def test_pass_at_k_is_one_minus_the_chance_k_draws_miss(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_pass_at_1_is_the_fraction_correct() -> None:
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 1, 4), (3, 4, 1), (3, 1, 0)])
def test_pass_at_k_refuses_what_is_not_defined(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(n, c, k)


def session(i: int, status: SessionStatus, reward: float | None, **kw: object) -> SessionResult:
    return SessionResult.model_validate(
        {"session_id": f"s{i}", "task_id": "t", "index": i, "status": status, "reward": reward,
         "harness": "command", **kw}
    )  # fmt: skip


def test_a_task_s_samples_leave_out_unscored_and_infra_sessions() -> None:
    sessions = [
        session(0, SessionStatus.COMPLETED, 1.0),
        session(1, SessionStatus.HARNESS_FAILED, 0.0, harness_started=True),
        session(2, SessionStatus.COMPLETED, 0.5),  # below the top: not correct
        session(3, SessionStatus.ERROR, None, error_type="ClientError", error_stage="build"),
        session(4, SessionStatus.COMPLETED, 1.0, harness_started=False),  # infra: no sample
    ]
    rates = pass_rates(sessions, top=1.0, group_size=5)
    assert rates is not None
    assert (rates.n, rates.c, rates.k) == (3, 1, 3)  # k capped at the samples there are
    assert rates.pass_1 == pytest.approx(1 / 3) and rates.pass_k == 1.0
    rates = pass_rates(sessions, top=0.5, group_size=2)
    assert rates is not None and (rates.c, rates.k) == (2, 2)
    assert rates.pass_k == pytest.approx(1 - comb(1, 2) / comb(3, 2))
    assert pass_rates(sessions[3:4], top=1.0, group_size=1) is None


def test_the_top_reward_is_the_spec_s_range_top() -> None:
    assert top_reward({"evaluator": {"reward_range": [0, 5]}}) == 5.0
    assert top_reward({"evaluator": {"kind": "command"}}) == 1.0
    assert top_reward({}) == 1.0

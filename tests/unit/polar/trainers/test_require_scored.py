"""The shared check of every trainer bridge: a batch with no scored session (or fewer than the
share `min_scored`) raises `UnscoredBatch`, naming the counts and each outcome label with one
example detail; every unscored session carries its outcome label and reason.

Each bridge's own use of it: tests/unit/polar/trainers/trl/test_trainers_trl.py (TRL's rollout
function and worker), test_trainers_slime.py, test_trainers_nemo_gym_shapes.py; verl's loop
(`polar.trainers.verl`) raises `unscored_batch` itself, checked by
tests/system/test_verl_agent_loop.py where verl runs.
"""

from __future__ import annotations

import pytest

from polar.contracts import SessionResult
from polar.records import SessionStatus
from polar.trainers._sessions import (
    Unscored,
    UnscoredBatch,
    absent_detail,
    absent_reason,
    check_min_scored,
    left_out,
    require_scored,
    unscored,
)
from tests.support.session_results import session_result

MISSING = "prepare: InvalidSource: source.path /x does not exist"


def session(
    sid: str, status: SessionStatus, reward: float | None, **fields: object
) -> SessionResult:
    return session_result(sid, status, reward, **({"harness": "command"} | fields))


def invalid_source(sid: str) -> SessionResult:
    return session(
        sid,
        SessionStatus.ERROR,
        None,
        error=MISSING,
        error_type="InvalidSource",
        error_stage="prepare",
    )


def test_an_errored_session_is_left_out_with_its_outcome_label_and_its_error() -> None:
    broken = invalid_source("s0")
    assert absent_reason(broken) == "task_error"  # once "status error", with no class
    assert absent_detail(broken) == MISSING
    assert unscored(broken, absent_reason(broken)) == Unscored("task_error", MISSING)
    assert str(Unscored("task_error", MISSING)) == f"task_error: {MISSING}"
    engine = session("s1", SessionStatus.ERROR, None, error_type="APIError", error_stage="run")
    assert absent_reason(engine) == "infra_error:engine"
    assert absent_detail(engine) == "run: APIError"  # no message: the outcome's detail
    cancelled = session("s2", SessionStatus.CANCELLED, None)
    assert absent_reason(cancelled) == "cancelled" and absent_detail(cancelled) == ""
    ungraded = session("s3", SessionStatus.COMPLETED, None)
    assert absent_reason(ungraded) == "no reward"
    assert left_out([broken, ungraded], "shrink") == {"s0": "task_error", "s3": "no reward"}


def test_a_batch_whose_every_session_ended_task_error_raises() -> None:
    reasons = [unscored(s, absent_reason(s)) for s in map(invalid_source, "abcdef")]
    with pytest.raises(UnscoredBatch) as raised:
        require_scored(reasons, what="TRL rollout call 1", note="min_scored=None allows it")
    assert str(raised.value) == (
        "TRL rollout call 1: 0 of 6 sessions scored (min_scored 0.0): "
        f"6 × task_error ({MISSING}). min_scored=None allows it"
    )
    assert (raised.value.scored, raised.value.asked) == (0, 6)
    assert raised.value.labels == {"task_error": 6}
    assert isinstance(raised.value, RuntimeError)
    require_scored(reasons, None)  # None: never raises


def test_a_mixed_batch_raises_below_min_scored_and_passes_at_or_above_it() -> None:
    storage = Unscored("infra_error:storage", "build: ClientError")
    reasons: list[Unscored | None] = [None, None, storage, Unscored("task_error", MISSING)]
    require_scored(reasons)  # the default: raise only when none was scored
    require_scored(reasons, 0.5)  # 2 of 4: at the share
    with pytest.raises(UnscoredBatch) as raised:
        require_scored(reasons, 0.75)
    message = str(raised.value)
    assert message.startswith("batch: 2 of 4 sessions scored (min_scored 0.75): ")
    assert "1 × infra_error:storage (build: ClientError)" in message
    assert f"1 × task_error ({MISSING})" in message
    # an early stop's cancelled extras do not count against the sessions asked for
    early = [None, None, None, Unscored("cancelled")]
    require_scored(early, 1.0, asked=3)
    with pytest.raises(UnscoredBatch, match="2 of 3 sessions scored"):
        require_scored([None, None, Unscored("cancelled"), Unscored("cancelled")], 1.0, asked=3)


def test_min_scored_is_a_share_or_none() -> None:
    assert check_min_scored(None) is None and check_min_scored(1) == 1.0
    for wrong in (-0.1, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            check_min_scored(wrong)

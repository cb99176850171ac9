"""score_traces' own request and result: their payloads round-trip, and a result written
before the rewards sidecar (no rewards_key) still reads."""

from __future__ import annotations

from polar.contracts import ScoreRequest, ScoreResult
from polar.records import SessionStatus


def test_a_score_result_without_a_sidecar_reads_as_rewards_in_the_traces() -> None:
    stored = '{"traces_key": "sessions/s/traces/b.jsonl", "num_traces": 2, '
    stored += '"num_response_tokens": 7, "trace_bytes": 99}'
    scored = ScoreResult.model_validate_json(stored)
    assert (scored.traces_key, scored.num_traces, scored.trace_bytes) == (
        "sessions/s/traces/b.jsonl",
        2,
        99,
    )
    assert scored.rewards_key is None  # older code: the rewards are in the traces


def test_the_request_and_result_round_trip() -> None:
    request = ScoreRequest(
        traces_key="k", reward=None, status=SessionStatus.ERROR, trace_rewards={"t": 1.0}
    )
    assert ScoreRequest.model_validate_json(request.model_dump_json()) == request
    result = ScoreResult(
        traces_key="k",
        rewards_key="k.rewards.json",
        num_traces=1,
        num_response_tokens=3,
        trace_bytes=10,
    )
    assert ScoreResult.model_validate_json(result.model_dump_json()) == result

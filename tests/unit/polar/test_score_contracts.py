"""score_traces' own request and result keep the payloads the workflow and its histories hold."""

from __future__ import annotations

from polar.contracts import BuildResult, RewardRequest, ScoreRequest, ScoreResult
from polar.records import SessionStatus


def test_a_score_result_decodes_as_the_build_result_the_stage_table_expected() -> None:
    scored = ScoreResult(
        traces_key="sessions/s/traces/b.jsonl",
        rewards_key="sessions/s/traces/b.rewards.json",
        num_traces=3,
        num_response_tokens=40,
        trace_bytes=1234,
    )
    as_build = BuildResult.model_validate_json(scored.model_dump_json())
    assert (as_build.traces_key, as_build.num_traces, as_build.trace_bytes) == (
        "sessions/s/traces/b.jsonl",
        3,
        1234,
    )
    assert as_build.num_response_tokens == 40 and as_build.num_completions == 0


def test_a_stored_build_result_of_score_traces_decodes_as_a_score_result() -> None:
    stored = BuildResult(
        traces_key="sessions/s/traces/b.jsonl",
        num_completions=0,
        num_traces=2,
        num_response_tokens=7,
        trace_bytes=99,
        breaks={"prefix_mismatch": 1},
    ).model_dump_json()
    scored = ScoreResult.model_validate_json(stored)
    assert (scored.traces_key, scored.num_traces, scored.trace_bytes) == (
        "sessions/s/traces/b.jsonl",
        2,
        99,
    )
    assert scored.rewards_key is None  # older code: the rewards are in the traces


def test_the_request_keeps_its_former_name_and_payload() -> None:
    assert RewardRequest is ScoreRequest
    request = ScoreRequest(
        traces_key="k", reward=None, status=SessionStatus.ERROR, trace_rewards={"t": 1.0}
    )
    assert ScoreRequest.model_validate_json(request.model_dump_json()) == request

"""End to end on the real stack: Temporal, SeaweedFS, the gateway process and the real vLLM.

The harness is the demo's multi-turn agent using the official `openai` SDK
(one of its turns streamed). A tap between the gateway and vLLM keeps what
vLLM really sampled, and the traces must hold exactly those tokens and logprobs.
"""

from __future__ import annotations

import pytest

from app.cli.demo import demo_task
from polar.client.sdk import PolarClient
from polar.contracts import TaskResult
from polar.records import SessionStatus
from tests.support.tap import Tap

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
async def demo_result(polar: PolarClient, gateway: str, tap: Tap) -> TaskResult:
    tap.exchanges.clear()
    spec = demo_task(sessions=2)
    result = await polar.wait(await polar.submit(spec), timeout_s=300)
    return result


async def test_demo_task_completes_with_rewards(demo_result: TaskResult) -> None:
    assert len(demo_result.sessions) == 2
    for session in demo_result.sessions:
        assert session.status == SessionStatus.COMPLETED, session.error
        assert session.reward == 1.0
        assert session.num_completions == 3
        assert session.num_traces == 3
        assert session.traces_key and session.traces_key.endswith("per_request.jsonl")


async def test_traces_hold_exactly_what_vllm_sampled(
    demo_result: TaskResult, polar: PolarClient, tap: Tap
) -> None:
    traced = []
    for session in demo_result.sessions:
        for trace in polar.load_traces(session):
            assert trace.loss_mask == [1] * len(trace.response_ids)
            assert trace.reward == 1.0 and trace.status == SessionStatus.COMPLETED
            assert trace.provenance.session_id == session.session_id
            traced.append(
                (tuple(trace.prompt_ids), tuple(trace.response_ids), tuple(trace.response_logprobs))
            )
    sampled = tap.sampled()
    assert len(sampled) == 6
    assert sorted(traced) == sorted(sampled)  # ids and float logprobs, bit for bit


async def test_multi_turn_prompts_extend_the_previous_turn(
    demo_result: TaskResult, polar: PolarClient
) -> None:
    for session in demo_result.sessions:
        records = polar.storage.list_completions(session.session_id)
        assert [r.attempt for r in records] == [1, 1, 1]
        assert all(r.has_token_ids and r.error is None for r in records)
        # every later call re-sends the earlier ones: its prompt starts with the earlier prompt
        for earlier, later in zip(records, records[1:], strict=False):
            assert later.prompt_token_ids[: len(earlier.prompt_token_ids)] == (
                earlier.prompt_token_ids
            )
        assert records[1].request.get("stream") is True  # the streamed turn went through too


PER_TRACE_EVALUATOR = """python - <<'PY'
import json, os
traces = [json.loads(line) for line in open(os.environ["POLAR_TRACES_FILE"])]
first = min(traces, key=lambda t: t["provenance"]["completion_seqs"][0])
json.dump({"reward": 0.5, "trace_rewards": {first["trace_id"]: 0.25}, "detail": "graded"},
          open(os.environ["POLAR_REWARD_FILE"], "w"))
PY"""


async def test_evaluator_can_reward_traces_one_by_one(polar: PolarClient, gateway: str) -> None:
    spec = demo_task(sessions=1).model_copy(deep=True)
    spec.builder.name = "prefix_merging"
    spec.evaluator.command = "true"
    spec.evaluator.reward_command = PER_TRACE_EVALUATOR
    result = await polar.wait(await polar.submit(spec), timeout_s=300)
    session = result.sessions[0]
    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.reward == 0.5 and session.evaluation.endswith("graded")
    traces = sorted(polar.load_traces(session), key=lambda t: t.provenance.completion_seqs[0])
    assert traces[0].reward == 0.25
    assert all(t.reward == 0.5 for t in traces[1:])
    # every call is in exactly one trace; a random model's text rarely re-tokenises to the
    # ids it sampled, so splits happen here, and each one is classified
    assert sum(len(t.provenance.record_ids) for t in traces) == session.num_completions == 3
    assert sum(session.trace_breaks.values()) == session.num_traces - 1, session.trace_breaks

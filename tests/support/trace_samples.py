"""Traces as the SDK hands them out, and what a per-token column over a part of them must hold:
the reference of the one-definition tests (tests/unit/polar/client/test_export_masks.py, the
exports; tests/unit/polar/trainers/test_bridge_masks.py, the trainer bridges)."""

from __future__ import annotations

from typing import Any, Literal

from polar.records import SessionStatus, Trace, TraceProvenance

Over = Literal["prompt", "response", "sequence"]
"""What a per-token column is aligned with: `prompt_ids`, `response_ids`, or both joined."""
Holds = Literal["ids", "mask", "logprobs"]


def expected(trace: Trace, holds: Holds, over: Over) -> list[Any]:
    """What a column holding `holds` over `over` must be for `trace`."""
    p = len(trace.prompt_ids)
    if holds == "ids":
        prompt = trace.prompt_ids if over != "response" else []
        return [*prompt, *(trace.response_ids if over != "prompt" else [])]
    assert over != "prompt", "a mask or logprobs column is never over the prompt alone"
    response: list[Any] = trace.loss_mask if holds == "mask" else trace.response_logprobs
    pad: list[Any] = [0] * p if holds == "mask" else [0.0] * p
    return list(response) if over == "response" else pad + list(response)


def provenance(session: str, seqs: list[int], version: int | None) -> TraceProvenance:
    return TraceProvenance(
        session_id=session,
        task_id="t1",
        harness="command",
        builder="prefix_merging",
        model="policy",
        completion_seqs=seqs,
        record_ids=[f"{session}-r{seq}" for seq in seqs],
        policy_version=version,
    )


def sdk_traces() -> list[Trace]:
    """Traces as the SDK hands them out: a merged chain with interstitial (mask 0) tokens,
    single calls, an unscored session, a response the policy sampled none of."""
    user = [{"role": "user", "content": "Fix it."}]
    answer = {"role": "assistant", "content": "Done."}
    return [
        Trace(
            trace_id="s1/chain-0",
            prompt_ids=[11, 12, 13, 14],
            response_ids=[21, 22, 90, 91, 92, 23, 24],
            loss_mask=[1, 1, 0, 0, 0, 1, 1],
            response_logprobs=[-0.1, -2.5e-08, 0.0, 0.0, 0.0, -0.30000000000000004, -7.0],
            prompt_messages=user,
            response_message=answer,
            reward=1.0,
            status=SessionStatus.COMPLETED,
            provenance=provenance("s1", [100, 101], 3),
        ),
        Trace(
            trace_id="s1/r102",
            prompt_ids=[11, 15],
            response_ids=[25, 26, 2],
            loss_mask=[1, 1, 1],
            response_logprobs=[-1.5, -1e-300, -0.125],
            prompt_messages=user,
            response_message=answer,
            reward=1.0,
            status=SessionStatus.COMPLETED,
            provenance=provenance("s1", [102], 3),
        ),
        Trace(
            trace_id="s2/r200",
            prompt_ids=[11, 12, 13, 14, 15, 16],
            response_ids=[31, 32],
            loss_mask=[1, 0],
            response_logprobs=[-0.5, 0.0],
            reward=None,
            status=SessionStatus.ERROR,
            provenance=provenance("s2", [200], None),
        ),
        Trace(
            trace_id="s3/r300",
            prompt_ids=[11],
            response_ids=[2],
            loss_mask=[0],  # an end token only the chat template wrote
            response_logprobs=[0.0],
            reward=0.0,
            status=SessionStatus.HARNESS_FAILED,
            provenance=provenance("s3", [300], 4),
        ),
    ]

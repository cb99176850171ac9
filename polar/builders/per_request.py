"""The `per_request` builder: one trace per model call, every response token trained on."""

from __future__ import annotations

from polar.builders.base import BuildContext, BuildOutput, response_message, usable
from polar.models import CompletionRecord, Trace, TraceProvenance


def build_per_request(records: list[CompletionRecord], ctx: BuildContext) -> BuildOutput:
    """One Trace per usable record: prompt ids, sampled ids (mask 1) and their logprobs."""
    out = BuildOutput(traces=[])
    for record in records:
        problem = usable(record)
        if problem is not None:
            out.unusable.append(problem)
            continue
        assert record.prompt_token_ids is not None
        assert record.response_token_ids is not None and record.response_logprobs is not None
        request = record.normalized_request
        out.traces.append(
            Trace(
                trace_id=f"{ctx.session_id}/{record.record_id}",
                prompt_ids=list(record.prompt_token_ids),
                response_ids=list(record.response_token_ids),
                loss_mask=[1] * len(record.response_token_ids),
                response_logprobs=list(record.response_logprobs),
                prompt_messages=list(request.get("messages") or []),
                response_message=response_message(record),
                tools=request.get("tools"),
                provenance=TraceProvenance(
                    session_id=ctx.session_id,
                    task_id=ctx.task_id,
                    harness=ctx.harness,
                    builder=ctx.builder,
                    model=record.model,
                    completion_seqs=[record.seq],
                    record_ids=[record.record_id],
                ),
            )
        )
    return out

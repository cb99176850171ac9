"""The `per_request` builder: one trace per model call, every response token trained on."""

from __future__ import annotations

from polar.builders.base import (
    BuildContext,
    BuilderConfig,
    BuildOutput,
    end_of_turn_ids,
    prepare_records,
    provenance,
)
from polar.records import CompletionRecord, ReconstructionStats, Trace


def build_per_request(records: list[CompletionRecord], ctx: BuildContext) -> BuildOutput:
    """One Trace per usable sampled choice: prompt ids, sampled ids (mask 1) and logprobs.

    A call of `n` choices gives `n` traces with the same prompt ids.

    Config: `BuilderConfig` (tokenizer for missing prompt ids, reward policy).
    """
    config = BuilderConfig.model_validate(ctx.config)
    prepared, unusable = prepare_records(records, config)
    eos = end_of_turn_ids(config)
    out = BuildOutput(traces=[], unusable=unusable)
    for item in prepared:
        record = item.record
        request = record.normalized_request
        stats = ReconstructionStats(
            chains=len(prepared),
            members=1,
            sampled_tokens=len(item.response_ids),
            sampled_eos=int(bool(item.response_ids) and item.response_ids[-1] in eos),
            prompt_ids_rebuilt=[record.record_id] if item.prompt_rebuilt else [],
            unusable=len(unusable),
        )
        out.traces.append(
            Trace(
                trace_id=f"{ctx.session_id}/{item.key}",
                prompt_ids=item.prompt_ids,
                response_ids=item.response_ids,
                loss_mask=[1] * len(item.response_ids),
                response_logprobs=item.logprobs,
                prompt_messages=item.messages,
                response_message=item.response_message,
                tools=request.get("tools"),
                provenance=provenance(ctx, [item], stats, config.reward),
            )
        )
    return out

"""TRL's row layout of `polar export` (`trl.jsonl`), beside its rollout function and worker.

A conversational prompt–completion row (`prompt`, `completion`: message lists; `tools`) that
is also pre-tokenized (`input_ids` = prompt ids + response ids; `completion_mask`, TRL's
whole-sequence mask, = `[0] * len(prompt_ids) + Trace.loss_mask`), so `SFTTrainer` with
`completion_only_loss=True` trains exactly the sampled tokens. Extra columns:
`rollout_logprobs` (aligned with `input_ids`: 0.0 over the prompt and where the mask is 0; exact),
`reward` (None: not evaluated), `policy_version`, provenance. `completion` is None where the
conversation is unknown (a merged trace without its CompletionRecords). Each trace renders its
own choice (a call of `n > 1` choices gives one trace, hence one row, per choice).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from polar.client.sft import RecordIndex, clean_message, last_call
from polar.records import Trace
from polar.trainers.provenance import provenance_fields

TRL_JSONL = "trl.jsonl"


def prompt_completion(
    trace: Trace, records: RecordIndex | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """(prompt, completion) messages: the first call's messages, then everything after them
    up to the last answer; None when the last call is unknown or does not extend the first."""
    call = last_call(trace, records)
    if call is None:
        return None
    messages, answer, _ = call
    prompt = list(trace.prompt_messages)
    if len(trace.provenance.record_ids) == 1:
        return messages, [answer]
    key = [json.dumps(m, sort_keys=True, default=str) for m in prompt]
    if [json.dumps(m, sort_keys=True, default=str) for m in messages[: len(prompt)]] != key:
        return None
    return prompt, [*(clean_message(m) for m in messages[len(prompt) :]), answer]


def trl_row(
    trace: Trace, conversation: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None
) -> dict[str, Any]:
    """The trace as a TRL conversational prompt–completion row, pre-tokenized.

    `conversation`: (prompt messages, completion messages), or None when unknown.
    """
    p = len(trace.prompt_ids)
    prompt, completion = conversation if conversation is not None else (None, None)
    return {
        "prompt": prompt if prompt is not None else list(trace.prompt_messages) or None,
        "completion": completion,
        "tools": trace.tools,
        "input_ids": [*trace.prompt_ids, *trace.response_ids],
        "completion_mask": [0] * p + list(trace.loss_mask),
        "rollout_logprobs": [0.0] * p + list(trace.response_logprobs),
        "reward": trace.reward,
        **provenance_fields(trace),
    }


def trl_rows(records: RecordIndex | None) -> Callable[[Trace], dict[str, Any]]:
    """An export's TRL rows: each trace with its conversation, read from `records` where the
    trace was merged from several calls."""
    return lambda trace: trl_row(trace, prompt_completion(trace, records))

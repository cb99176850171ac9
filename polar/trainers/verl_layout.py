"""verl's row layout of `polar export` (`verl.parquet`), beside its agent loop (verl.py).

One `verl.experimental.agent_loop.AgentLoopOutput` per row: `prompt_ids`, `response_ids`,
`response_mask`, `response_logprobs` (exact, float64), `reward_score` (None: not evaluated),
`extra_fields` (Polar's provenance, `policy_version` included).
`AgentLoopOutput.model_validate(row).as_dict()` gives verl's batch keys `prompts`,
`responses`, `response_mask`, `rollout_log_probs`, `rm_scores`. Written in Parquet row groups
(`polar.client.sinks.ParquetSink`), never held whole in memory.
"""

from __future__ import annotations

from typing import Any

from polar.records import Trace
from polar.trainers.provenance import provenance_fields

VERL_PARQUET = "verl.parquet"


def verl_row(trace: Trace) -> dict[str, Any]:
    """The trace as the fields of verl's `AgentLoopOutput` (see the module docstring)."""
    return {
        "prompt_ids": list(trace.prompt_ids),
        "response_ids": list(trace.response_ids),
        "response_mask": list(trace.loss_mask),
        "response_logprobs": list(trace.response_logprobs),
        "reward_score": trace.reward,
        "num_turns": len(trace.provenance.record_ids),
        "extra_fields": provenance_fields(trace),
    }


def verl_schema() -> Any:
    """The Arrow schema of `verl.parquet` (explicit: an empty export has it too)."""
    import pyarrow as pa

    text = pa.string()
    extra = pa.struct(
        [
            ("trace_id", text),
            ("session_id", text),
            ("task_id", text),
            ("status", text),
            ("policy_version", pa.int64()),
            ("reward_policy", text),
            ("builder", text),
            ("harness", text),
            ("model", text),
            ("record_ids", pa.list_(text)),
            ("completion_seqs", pa.list_(pa.int64())),
        ]
    )
    columns: list[tuple[str, pa.DataType]] = [
        ("prompt_ids", pa.list_(pa.int64())),
        ("response_ids", pa.list_(pa.int64())),
        ("response_mask", pa.list_(pa.int8())),
        ("response_logprobs", pa.list_(pa.float64())),
        ("reward_score", pa.float64()),
        ("num_turns", pa.int64()),
        ("extra_fields", extra),
    ]
    return pa.schema(columns)

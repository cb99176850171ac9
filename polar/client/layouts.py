"""Trainer-native layouts of traces: verl, TRL and slime rows, and the streaming writers.

Each layout keeps the token ids, the loss mask, the rollout logprobs (exact,
float64), the reward (None: not evaluated) and the policy version, and is
written row by row (`JsonlSink`) or in Parquet row groups (`ParquetSink`),
never held whole in memory.

* verl (`verl.parquet`): one `verl.experimental.agent_loop.AgentLoopOutput`
  per row: `prompt_ids`, `response_ids`, `response_mask`, `response_logprobs`,
  `reward_score`, `extra_fields` (Polar's provenance, `policy_version`
  included). `AgentLoopOutput.model_validate(row).as_dict()` gives verl's batch
  keys `prompts`, `responses`, `response_mask`, `rollout_log_probs`, `rm_scores`.
* TRL (`trl.jsonl`): a conversational prompt–completion row (`prompt`,
  `completion`: message lists; `tools`) that is also pre-tokenized (`input_ids`,
  `completion_mask` = the loss mask over `input_ids`), so `SFTTrainer` with
  `completion_only_loss=True` trains exactly the sampled tokens. Extra columns:
  `rollout_logprobs` (aligned with `input_ids`, 0.0 where the mask is 0),
  `reward`, `policy_version`, provenance. `completion` is None where the
  conversation is unknown (a merged trace without its CompletionRecords).
* slime (`slime.jsonl`): one `slime.utils.types.Sample.to_dict()` per line
  (`Sample.from_dict(json.loads(line))` reloads it): `tokens`,
  `response_length`, `loss_mask` (response part), `rollout_log_probs`,
  `reward`, `weight_versions` (`[policy_version]`), `status`, `group_index`
  (the task), `rollout_id` (the session: slime averages a rollout's samples
  together), `index`, `session_id`, `metadata` (provenance).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from polar.records import CompletionRecord, SessionStatus, Trace

VERL_PARQUET = "verl.parquet"
TRL_JSONL = "trl.jsonl"
SLIME_JSONL = "slime.jsonl"
ROW_GROUP = 256
"""Rows per Parquet row group: what a Parquet writer holds in memory at once."""
RecordIndex = Mapping[tuple[str, str], CompletionRecord]


# --------------------------------------------------------------------------- provenance


def provenance_fields(trace: Trace) -> dict[str, Any]:
    """The provenance every layout carries (flat, JSON- and Arrow-friendly)."""
    prov = trace.provenance
    return {
        "trace_id": trace.trace_id,
        "session_id": prov.session_id,
        "task_id": prov.task_id,
        "status": None if trace.status is None else trace.status.value,
        "policy_version": prov.policy_version,
        "reward_policy": prov.reward_policy,
        "builder": prov.builder,
        "harness": prov.harness,
        "model": prov.model,
        "record_ids": list(prov.record_ids),
        "completion_seqs": list(prov.completion_seqs),
    }


# --------------------------------------------------------------------------- verl


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


# --------------------------------------------------------------------------- TRL


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


# --------------------------------------------------------------------------- slime

SLIME_SAMPLE_FIELDS = frozenset(
    {
        "group_index",
        "index",
        "rollout_id",
        "prompt",
        "tokens",
        "multimodal_inputs",
        "multimodal_train_inputs",
        "multimodal_train_input_id",
        "apply_chat_template_kwargs",
        "response",
        "response_length",
        "label",
        "reward",
        "loss_mask",
        "weight_versions",
        "rollout_log_probs",
        "rollout_top_p_token_ids",
        "rollout_top_p_token_offsets",
        "rollout_routed_experts",
        "remove_sample",
        "teacher_log_probs",
        "status",
        "metadata",
        "generate_function_path",
        "custom_rm_path",
        "train_metadata",
        "session_id",
        "non_generation_time",
        "spec_info",
        "prefix_cache_info",
    }
)
"""slime's documented `Sample` fields (THUDM/slime 624b824a, slime/utils/types.py), which a
slime row may use: slime is not on PyPI (the name there is another project), so exports are
checked against this schema (tests/integration/test_export.py, scripts/check_trainer_layouts.py)."""
SLIME_STATUSES = frozenset({"pending", "completed", "truncated", "aborted", "failed"})
"""slime's `Sample.Status` values at the same commit."""

SLIME_STATUS = {
    SessionStatus.COMPLETED: "completed",
    SessionStatus.HARNESS_FAILED: "failed",
    SessionStatus.TIMEOUT: "failed",
    SessionStatus.ERROR: "aborted",
    SessionStatus.CANCELLED: "aborted",
}
"""Session status → slime `Sample.Status`: a failed or timed-out harness left real output
(slime's FAILED: "may still contain partial valid output"); no evaluation → ABORTED."""


class Ordinals:
    """Small integers for string keys, in order of first appearance (slime's int ids)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def __call__(self, key: str) -> int:
        return self._ids.setdefault(key, len(self._ids))


def slime_row(
    trace: Trace, *, index: int, group_index: int, rollout_id: int, response_text: str
) -> dict[str, Any]:
    """The trace as slime's `Sample.to_dict()` (see the module docstring)."""
    p = len(trace.prompt_ids)
    prov = trace.provenance
    return {
        "group_index": group_index,
        "index": index,
        "rollout_id": rollout_id,
        "prompt": list(trace.prompt_messages),
        "tokens": [*trace.prompt_ids, *trace.response_ids],
        "response": response_text,
        "response_length": len(trace.response_ids),
        "label": None,
        "reward": trace.reward,
        "loss_mask": list(trace.loss_mask),
        "weight_versions": [] if prov.policy_version is None else [str(prov.policy_version)],
        "rollout_log_probs": list(trace.response_logprobs),
        "remove_sample": False,
        "status": SLIME_STATUS.get(trace.status, "pending") if trace.status else "pending",
        "metadata": {**provenance_fields(trace), "prompt_length": p},
        "session_id": prov.session_id,
    }


# --------------------------------------------------------------------------- writers


class RowSink(Protocol):
    """Where rows go, one at a time."""

    def write(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """JSON lines, written as they come (floats as Python repr's them: exact)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = 0
        self._file = path.open("w")

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.rows += 1

    def close(self) -> None:
        self._file.close()


class ParquetSink:
    """A Parquet file written in row groups of `row_group` rows (at most that many held)."""

    def __init__(self, path: Path, schema: Any, row_group: int = ROW_GROUP) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self.rows = 0
        self._schema = schema
        self._row_group = row_group
        self._pending: list[dict[str, Any]] = []
        self._writer = pq.ParquetWriter(str(path), schema)

    def write(self, row: dict[str, Any]) -> None:
        self._pending.append(row)
        self.rows += 1
        if len(self._pending) >= self._row_group:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._pending:
            table = pa.Table.from_pylist(self._pending, schema=self._schema)
            self._writer.write_table(table, row_group_size=self._row_group)
            self._pending = []

    def close(self) -> None:
        self._flush()
        self._writer.close()


class ArrowSink:
    """A `datasets` Arrow file written in batches (`datasets.arrow_writer.ArrowWriter`)."""

    def __init__(self, path: Path, features: Any, batch: int = ROW_GROUP) -> None:
        from datasets.arrow_writer import ArrowWriter

        self.path = path
        self.rows = 0
        self._writer = ArrowWriter(features=features, path=str(path), writer_batch_size=batch)

    def write(self, row: dict[str, Any]) -> None:
        self._writer.write(row)
        self.rows += 1

    def close(self) -> None:
        self._writer.finalize()
        self._writer.close()


RowOf = Callable[[Trace], dict[str, Any]]

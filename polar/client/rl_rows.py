"""RL rows of `polar export`: `traces.jsonl` and the same rows as a Hugging Face dataset.

One row per trace. Columns: `trace_id`; `input_ids` (= prompt ids + response ids), the only
column over the whole sequence; `loss_mask` and `response_logprobs`, aligned with the response
part (`input_ids[prompt_length:]`), as `Trace.loss_mask` is everywhere in Polar (1 = sampled by
the policy; 0 = interstitial or template-written context, logprob 0.0); `prompt_length`,
`response_length`; `reward` (None: not evaluated, never 0); `status` (the session's terminal
status); provenance flattened: `session_id`, `task_id`, `harness`, `builder`, `model`,
`reward_policy`, `record_ids`, `completion_seqs`, `policy_version`. Every trace is exported
whatever its status or reward: a trainer filters on `status` and `reward`. The dataset
(`dataset/`, `save_to_disk`; reload with `datasets.load_from_disk`) has ids int32, masks int8,
logprobs float64 (so they round-trip exactly as the backend reported them).

How trainers read the columns (`p = prompt_length`):

| trainer | its field | from this row |
|---|---|---|
| verl (`AgentLoopOutput`) | `prompt_ids` / `response_ids` | `input_ids[:p]` / `input_ids[p:]` |
| | `response_mask` | `loss_mask` |
| | `response_logprobs` (rollout logprobs) | `response_logprobs` |
| | `reward_score` | `reward` |
| NeMo RL (GRPO `train_data`) | `input_ids`, `input_lengths` | `input_ids`, `len(input_ids)` |
| | `token_mask` (whole sequence) | `[0] * p + loss_mask` |
| | `generation_logprobs` (whole sequence) | `[0.0] * p + response_logprobs` |
| | `sample_mask` | `status == "completed" and reward is not None` |
| slime (`Sample`) | `tokens` | `input_ids` |
| | `response_length` | `response_length` |
| | `loss_mask` (response part) | `loss_mask` |
| | `rollout_log_probs` | `response_logprobs` |
| | `reward`, `metadata` | `reward`, provenance columns |
| | `status` | `completed` → COMPLETED, `harness_failed`/`timeout` → FAILED, others → ABORTED |
| TRL (pre-tokenized) | `input_ids` | `input_ids` |
| | `completion_mask` (whole sequence) | `[0] * p + loss_mask` |
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polar.client.sinks import ArrowSink
from polar.records import Trace

if TYPE_CHECKING:
    from datasets import Dataset, Features


def rl_row(trace: Trace) -> dict[str, Any]:
    """One trainer row: `input_ids`; `loss_mask` and logprobs over its response part (the
    trace's own); reward, provenance."""
    p = len(trace.prompt_ids)
    prov = trace.provenance
    return {
        "trace_id": trace.trace_id,
        "input_ids": [*trace.prompt_ids, *trace.response_ids],
        "loss_mask": list(trace.loss_mask),
        "response_logprobs": list(trace.response_logprobs),
        "prompt_length": p,
        "response_length": len(trace.response_ids),
        "reward": trace.reward,
        "status": None if trace.status is None else trace.status.value,
        "session_id": prov.session_id,
        "task_id": prov.task_id,
        "harness": prov.harness,
        "builder": prov.builder,
        "model": prov.model,
        "reward_policy": prov.reward_policy,
        "record_ids": list(prov.record_ids),
        "completion_seqs": list(prov.completion_seqs),
        "policy_version": prov.policy_version,
    }


def rl_features() -> Features:
    """The Arrow schema of RL rows (explicit, so that an empty export has it too)."""
    from datasets import Features, List, Value

    text = Value("string")
    return Features(
        {
            "trace_id": text,
            "input_ids": List(Value("int32")),
            "loss_mask": List(Value("int8")),
            "response_logprobs": List(Value("float64")),
            "prompt_length": Value("int32"),
            "response_length": Value("int32"),
            "reward": Value("float64"),
            "status": text,
            "session_id": text,
            "task_id": text,
            "harness": text,
            "builder": text,
            "model": text,
            "reward_policy": text,
            "record_ids": List(text),
            "completion_seqs": List(Value("int64")),
            "policy_version": Value("int64"),
        }
    )


def rl_dataset(rows: Sequence[dict[str, Any]]) -> Dataset:
    """RL rows as a `datasets.Dataset` with the `rl_features` schema."""
    from datasets import Dataset

    features = rl_features()
    columns = {name: [row[name] for row in rows] for name in features}
    return Dataset.from_dict(columns, features=features)


def save_dataset(dataset: Dataset, path: Path) -> None:
    """`save_to_disk` quietly, in at least one shard (an empty one with none cannot be loaded)."""
    import datasets

    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        dataset.save_to_disk(str(path), num_shards=1 if len(dataset) == 0 else None)
    finally:
        if shown:
            datasets.enable_progress_bars()


class DatasetSink:
    """RL rows into a Hugging Face dataset at `target`: written in batches to an Arrow file
    beside it, saved (`save_to_disk`, memory-mapped from that file) when closed."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self._tmp = target.parent / f".{target.name}.arrow"
        self._sink = ArrowSink(self._tmp, rl_features())

    def write(self, row: dict[str, Any]) -> None:
        self._sink.write(row)

    def close(self) -> None:
        from datasets import Dataset

        self._sink.close()
        if self.target.exists():
            shutil.rmtree(self.target)
        save_dataset(Dataset.from_file(str(self._tmp)), self.target)  # memory-mapped
        self._tmp.unlink()

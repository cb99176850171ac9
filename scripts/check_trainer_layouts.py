"""Load a `polar export` directory with each trainer's own data code and print what it got.

Run it in an environment where the trainers import (they are not Polar's
dependencies; verl pins versions Polar does not use), e.g. a throwaway venv
that sees Polar's packages and adds `trl`, `verl` (with its `ray`,
`tensordict`, `hydra-core`) and a slime checkout on PYTHONPATH:

    PYTHONPATH=/path/to/slime /tmp/venv-trainers/bin/python \\
        scripts/check_trainer_layouts.py EXPORT_DIR --model .polar/models/tiny-qwen3

Each check reloads every row, compares the trainer's view with the export
(token ids, loss mask, rollout logprobs, reward, policy version), and exits
non-zero on the first disagreement. A trainer that does not import is
reported as skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any


def check_verl(out: Path) -> str:
    """verl: each Parquet row is an `AgentLoopOutput`; `as_dict()` gives the batch keys."""
    import pyarrow.parquet as pq
    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    rows, first = 0, ""
    for batch in pq.ParquetFile(out / "verl.parquet").iter_batches(batch_size=64):
        for row in batch.to_pylist():
            output = AgentLoopOutput.model_validate({**row, "metrics": {}}).as_dict()
            assert output["prompts"].tolist() == row["prompt_ids"]
            assert output["responses"].tolist() == row["response_ids"]
            assert output["response_mask"].tolist() == row["response_mask"]
            exact = torch.tensor(row["response_logprobs"], dtype=torch.float64)
            assert output["rollout_log_probs"].double().allclose(exact, atol=1e-6)  # float32
            if row["reward_score"] is not None:
                assert float(output["rm_scores"][-1]) == row["reward_score"]
            if not first:
                first = (
                    f"keys {sorted(k for k in output if k != 'metrics')}; "
                    f"prompts {tuple(output['prompts'].shape)}, responses "
                    f"{tuple(output['responses'].shape)}, response_mask sum "
                    f"{int(output['response_mask'].sum())}, rollout_log_probs "
                    f"{output['rollout_log_probs'].dtype}, rm_scores[-1] "
                    f"{float(output['rm_scores'][-1]) if 'rm_scores' in output else None}, "
                    f"policy_version {output['extra_fields']['policy_version']}"
                )
            rows += 1
    return f"{rows} AgentLoopOutput rows; first: {first}"


def check_trl(out: Path, model: Path | None) -> str:
    """TRL: `datasets.load_dataset('json')`, `is_conversational`, and `SFTTrainer`'s own
    dataset preparation (labels from `completion_mask` with `completion_only_loss`)."""
    import datasets
    from trl.data_utils import is_conversational

    dataset = datasets.load_dataset("json", data_files=str(out / "trl.jsonl"), split="train")
    conversational = sum(is_conversational({"prompt": p}) for p in dataset["prompt"] if p)
    said = f"{len(dataset)} rows, {conversational} conversational (TRL's is_conversational)"
    if model is None:
        return said
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    with tempfile.TemporaryDirectory() as tmp:
        trainer = SFTTrainer(
            model=AutoModelForCausalLM.from_pretrained(model),
            processing_class=AutoTokenizer.from_pretrained(model),
            args=SFTConfig(
                output_dir=tmp,
                completion_only_loss=True,
                report_to=[],
                max_length=None,
                use_cpu=True,
            ),
            train_dataset=dataset,
        )
        prepared = trainer.train_dataset
        trained = 0
        for source, row in zip(dataset, prepared, strict=True):
            pairs = zip(source["input_ids"], source["completion_mask"], strict=True)
            expected = [t if m else -100 for t, m in pairs]
            assert row["labels"] == expected, source["trace_id"]
            trained += sum(1 for t in row["labels"] if t != -100)
    return (
        f"{said}; SFTTrainer prepared {len(prepared)} rows, columns "
        f"{sorted(prepared.column_names)[:6]}..., {trained} label tokens = the mask-1 tokens"
    )


def check_slime(out: Path) -> str:
    """slime: each line is `Sample.to_dict()`; `Sample.from_dict` reloads it."""
    from slime.utils.types import Sample

    rows, first = 0, ""
    with (out / "slime.jsonl").open() as f:
        for line in f:
            data = json.loads(line)
            sample = Sample.from_dict(data)
            assert sample.tokens == data["tokens"] and sample.loss_mask == data["loss_mask"]
            assert len(sample.loss_mask) == sample.response_length
            assert sample.rollout_log_probs == data["rollout_log_probs"]
            unknown = set(data) - set(Sample.__dataclass_fields__)
            assert not unknown, unknown
            if not first:
                first = (
                    f"status {sample.status}, tokens {len(sample.tokens)}, response_length "
                    f"{sample.response_length}, effective_response_length "
                    f"{sample.effective_response_length}, reward {sample.reward}, "
                    f"weight_versions {sample.weight_versions}, group_index "
                    f"{sample.group_index}, rollout_id {sample.rollout_id}"
                )
            rows += 1
    return f"{rows} Samples; first: {first}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="a `polar export` directory")
    parser.add_argument("--model", type=Path, help="a model dir for TRL's SFTTrainer")
    args = parser.parse_args(argv)
    checks: dict[str, Any] = {
        "verl": lambda: check_verl(args.out),
        "trl": lambda: check_trl(args.out, args.model),
        "slime": lambda: check_slime(args.out),
    }
    for name, check in checks.items():
        try:
            print(f"{name}: {check()}")
        except ImportError as exc:
            print(f"{name}: skipped ({exc})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

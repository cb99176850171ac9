"""Check `polar export`'s trainer layouts row by row with each trainer's own data code.

Every row of `verl.parquet`, `trl.jsonl` and `slime.jsonl` is read the way
that trainer reads it and compared with Polar's own trace for that row: the
trace id, token ids, loss mask, rollout logprobs, reward and policy version.
The first disagreement exits 1 with the layout, row, trace and field.

* verl (0.9.1): each row through `AgentLoopOutput.model_validate(row).as_dict()`:
  `prompts`, `responses`, `response_mask`; `rollout_log_probs` equals the
  float32 of the exact logprobs (the Parquet column itself is the exact float64);
  `rm_scores` holds the reward at the last token and 0 elsewhere, absent when
  there is no reward; `extra_fields.policy_version`.
* TRL (1.16.0): `datasets.load_dataset("json")`, as TRL's docs load a dataset;
  `trl.data_utils.is_conversational` on each prompt and completion; with
  `--model`, `SFTTrainer(completion_only_loss=True)`'s own dataset preparation
  and data collator. Their labels must equal the token where the loss mask is 1
  and -100 elsewhere.
* slime: slime is not on PyPI (PyPI's `slime` is an unrelated project). Its
  source cannot be fetched where this runs, so each line is checked against the
  documented schema: the field set and `Status` values of
  `slime.utils.types.Sample` at THUDM/slime 624b824a (slime/utils/types.py),
  `response_length == len(loss_mask) == len(rollout_log_probs)`, and
  `weight_versions` as a list of strings. If a slime checkout is on PYTHONPATH,
  `Sample.from_dict` also reloads each line and its fields are the ones
  compared.

Polar's traces, the reference: `--traces FILE` (Polar `Trace` JSON lines, as the
builders store them and `polar export --traces` reads them), or by default the
export's own `traces.jsonl` (Polar's RL rows, written by `--format all` or
`jsonl`).

`bash scripts/setup_trainer_venv.sh` builds `.venv-trainers` (pinned trl and verl,
with Polar's packages and CPU torch taken from `.venv`) and runs this check on
a sample export. By hand:

    .venv-trainers/bin/python scripts/check_trainer_layouts.py EXPORT_DIR \\
        --model .polar/models/tiny-qwen3 --require verl,trl

The sample export (tests/integration/test_export.py's 4 sessions, prefix_merging traces
of a realistic agent session, with the tiny model's tokenizer) comes from
`.venv/bin/python -m tests.support.sample_export OUT`, which writes OUT/export
and its `Trace` file OUT/polar-traces.jsonl. A trainer that
does not import is reported as skipped. That is an error (exit 1) only when the
trainer is listed in `--require`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar.trainers.slime_layout import SLIME_SAMPLE_FIELDS, SLIME_STATUSES

TRAINERS = ("verl", "trl", "slime")

DATASETS_JSON_ROUNDING = 5e-11
"""Largest change `datasets.load_dataset('json')` makes to a float it re-encodes (10 decimals)."""


class Mismatch(Exception):
    """A layout's row disagrees with Polar's trace (or the row counts differ)."""


@dataclass(frozen=True)
class Expected:
    """What Polar's trace says a row must keep."""

    trace_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    """Over the response tokens."""
    logprobs: list[float]
    """Over the response tokens, exact."""
    reward: float | None
    policy_version: int | None


def expected_of(data: dict[str, Any]) -> Expected:
    """A Polar `Trace` JSON object, or an RL row of the export's `traces.jsonl`."""
    if "prompt_ids" in data:  # a Trace
        return Expected(
            trace_id=data["trace_id"],
            prompt_ids=data["prompt_ids"],
            response_ids=data["response_ids"],
            loss_mask=data["loss_mask"],
            logprobs=data["response_logprobs"],
            reward=data["reward"],
            policy_version=data["provenance"]["policy_version"],
        )
    p = data["prompt_length"]
    if len(data["loss_mask"]) != len(data["input_ids"]) - p:  # an export from before
        raise Mismatch(
            f"RL row of trace {data['trace_id']}: loss_mask has {len(data['loss_mask'])} values "
            f"for {len(data['input_ids']) - p} response tokens (it is over the response part)"
        )
    return Expected(
        trace_id=data["trace_id"],
        prompt_ids=data["input_ids"][:p],
        response_ids=data["input_ids"][p:],
        loss_mask=data["loss_mask"],
        logprobs=data["response_logprobs"],
        reward=data["reward"],
        policy_version=data["policy_version"],
    )


def read_expected(paths: list[Path]) -> Iterator[Expected]:
    """Polar's traces, a line at a time."""
    for path in paths:
        with path.open() as f:
            for line in f:
                if line.strip():
                    yield expected_of(json.loads(line))


def short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


class RowCheck:
    """Compares one layout's row with its trace; a disagreement raises `Mismatch`."""

    def __init__(self, layout: str, index: int, want: Expected) -> None:
        self.layout, self.index, self.want = layout, index, want

    def same(self, field: str, got: Any, want: Any) -> None:
        if got != want or type(got) is not type(want) and not _numbers(got, want):
            raise Mismatch(
                f"{self.layout} row {self.index} (trace {self.want.trace_id}): {field}: "
                + difference(got, want)
            )

    def holds(self, what: str, ok: bool) -> None:
        if not ok:
            raise Mismatch(f"{self.layout} row {self.index} (trace {self.want.trace_id}): {what}")


def difference(got: Any, want: Any) -> str:
    """Where two values differ: the first differing position of two lists, else both values."""
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return f"the trainer sees {len(got)} values, Polar's trace has {len(want)}"
        i = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
        return f"at [{i}] the trainer sees {got[i]!r}, Polar's trace has {want[i]!r}"
    return f"the trainer sees {short(got)}, Polar's trace has {short(want)}"


def _numbers(a: Any, b: Any) -> bool:
    """int and float compare equal by value (JSON 1.0 vs 1); bool never passes as a number."""
    kinds = (int, float)
    return (
        isinstance(a, kinds)
        and isinstance(b, kinds)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    )


def paired(layout: str, rows: Iterable[Any], expected: Iterable[Expected]) -> Iterator[Any]:
    """(index, row, expected) in step; a row count that differs is a mismatch."""
    missing = object()
    for i, (row, want) in enumerate(itertools.zip_longest(rows, expected, fillvalue=missing)):
        if row is missing or want is missing:
            side = "fewer" if row is missing else "more"
            raise Mismatch(f"{layout} has {side} rows than Polar's traces (at row {i})")
        yield i, row, RowCheck(layout, i, want)


def float32(values: list[float]) -> list[float]:
    import numpy as np

    return [float(v) for v in np.asarray(values, dtype=np.float32)]


# --------------------------------------------------------------------------- verl


def check_verl(out: Path, expected: Callable[[], Iterator[Expected]]) -> str:
    """verl: each Parquet row is an `AgentLoopOutput`; `as_dict()` gives verl's batch keys."""
    import pyarrow.parquet as pq
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    def rows() -> Iterator[dict[str, Any]]:
        for batch in pq.ParquetFile(out / "verl.parquet").iter_batches(batch_size=64):
            yield from batch.to_pylist()

    count, trained, first = 0, 0, ""
    for _, row, check in paired("verl.parquet", rows(), expected()):
        want = check.want
        output = AgentLoopOutput.model_validate({**row, "metrics": {}}).as_dict()
        extra = output["extra_fields"]
        check.same("extra_fields.trace_id", extra["trace_id"], want.trace_id)
        check.same("prompts (token ids)", output["prompts"].tolist(), want.prompt_ids)
        check.same("responses (token ids)", output["responses"].tolist(), want.response_ids)
        check.same("response_mask (loss mask)", output["response_mask"].tolist(), want.loss_mask)
        check.same("response_logprobs (Parquet, float64)", row["response_logprobs"], want.logprobs)
        check.same(
            "rollout_log_probs (verl's float32 tensor)",
            output["rollout_log_probs"].tolist(),
            float32(want.logprobs),
        )
        check.same("reward_score", row["reward_score"], want.reward)
        if want.reward is None:
            check.holds("rm_scores present for a trace without a reward", "rm_scores" not in output)
        else:
            rm_scores = output["rm_scores"].tolist()
            check.same("rm_scores[-1] (reward)", rm_scores[-1], float32([want.reward])[0])
            check.holds("rm_scores not 0 before the last token", not any(rm_scores[:-1]))
        check.same("extra_fields.policy_version", extra["policy_version"], want.policy_version)
        trained += int(output["response_mask"].sum())
        if not first:
            first = (
                f"keys {sorted(k for k in output if k != 'metrics')}; prompts "
                f"{tuple(output['prompts'].shape)}, responses {tuple(output['responses'].shape)}, "
                f"rollout_log_probs {output['rollout_log_probs'].dtype}, rm_scores[-1] "
                f"{output['rm_scores'][-1].item() if 'rm_scores' in output else None}, "
                f"policy_version {extra['policy_version']}"
            )
        count += 1
    return (
        f"{count} AgentLoopOutput rows = Polar's traces ({trained} mask-1 tokens); first: {first}"
    )


# --------------------------------------------------------------------------- TRL


def check_trl(out: Path, expected: Callable[[], Iterator[Expected]], model: Path | None) -> str:
    """TRL: `load_dataset('json')`, `is_conversational`, and (with a model) `SFTTrainer`'s own
    dataset preparation and collator (labels from `completion_mask`, `completion_only_loss`).

    The file's floats are checked exactly. `load_dataset` may hand back floats to 10 decimals:
    when a column holds structs of mixed types (tool-call arguments), datasets re-encodes the
    rows with pandas' ujson (`double_precision=10`) before Arrow parses them. TRL's view of the
    logprobs and reward is therefore compared within `DATASETS_JSON_ROUNDING`, and the
    largest difference is printed.
    """
    import datasets
    from trl.data_utils import is_conversational

    def raw_lines() -> Iterator[dict[str, Any]]:
        with (out / "trl.jsonl").open() as f:
            for line in f:
                yield json.loads(line)

    with tempfile.TemporaryDirectory() as cache:
        dataset = datasets.load_dataset(
            "json", data_files=str(out / "trl.jsonl"), split="train", cache_dir=cache
        )
        conversational, rounded, largest = 0, 0, 0.0
        for _, (row, raw), check in paired(
            "trl.jsonl", zip(dataset, raw_lines(), strict=True), expected()
        ):
            want = check.want
            p = len(want.prompt_ids)
            logprobs = [0.0] * p + want.logprobs
            check.same("trace_id", row["trace_id"], want.trace_id)
            check.same("input_ids", row["input_ids"], want.prompt_ids + want.response_ids)
            check.same(
                "completion_mask (loss mask)", row["completion_mask"], [0] * p + want.loss_mask
            )
            check.same("rollout_logprobs (in the file)", raw["rollout_logprobs"], logprobs)
            check.same("reward (in the file)", raw["reward"], want.reward)
            got = [*row["rollout_logprobs"], row["reward"]]
            check.holds(
                "rollout_logprobs/reward lengths or None-ness differ after load_dataset",
                len(got) == len(logprobs) + 1 and (got[-1] is None) == (want.reward is None),
            )
            for a, b in zip(got, [*logprobs, want.reward], strict=True):
                if a is not None and b is not None and a != b:
                    rounded += 1
                    largest = max(largest, abs(a - b))
            check.holds(
                f"load_dataset's logprobs/reward differ by {largest:.3g} "
                f"(> {DATASETS_JSON_ROUNDING:g}) from Polar's trace",
                largest <= DATASETS_JSON_ROUNDING,
            )
            check.same("policy_version", row["policy_version"], want.policy_version)
            for key in ("prompt", "completion"):
                if row[key] is not None:
                    check.holds(f"{key} is not conversational", is_conversational({key: row[key]}))
            conversational += row["prompt"] is not None and row["completion"] is not None
        said = (
            f"{len(dataset)} rows = Polar's traces (file floats exact; load_dataset rounded "
            f"{rounded} logprob/reward values, largest difference {largest:.3g}); "
            f"{conversational} with a conversational prompt and completion (TRL's "
            "is_conversational)"
        )
        if model is None:
            return said
        return f"{said}; {sft_labels(dataset, expected, model)}"


def sft_labels(dataset: Any, expected: Callable[[], Iterator[Expected]], model: Path) -> str:
    """SFTTrainer's prepared labels and collated batch: the loss mask's tokens, nothing else."""
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
        for _, row, check in paired("trl.jsonl (SFTTrainer)", prepared, expected()):
            want = check.want
            full = want.prompt_ids + want.response_ids
            mask = [0] * len(want.prompt_ids) + want.loss_mask
            labels = [t if m else -100 for t, m in zip(full, mask, strict=True)]
            check.same("SFTTrainer input_ids", row["input_ids"], full)
            check.same("SFTTrainer labels", row["labels"], labels)
            batch = trainer.data_collator(
                [{"input_ids": row["input_ids"], "labels": row["labels"]}]
            )
            check.same("collated labels", batch["labels"][0].tolist(), labels)
            trained += sum(1 for t in labels if t != -100)
    return (
        f"SFTTrainer prepared and collated {len(prepared)} rows: {trained} label tokens, "
        "exactly the mask-1 tokens"
    )


# --------------------------------------------------------------------------- slime


def slime_sample() -> Any:
    """slime's `Sample` where a slime checkout imports, else None (the schema check only)."""
    try:
        from slime.utils.types import Sample
    except ImportError:
        return None
    return Sample


def check_slime(out: Path, expected: Callable[[], Iterator[Expected]]) -> str:
    """slime: slime's `Sample` schema at 624b824a; `Sample.from_dict` too where slime imports."""
    sample_class = slime_sample()

    def lines() -> Iterator[dict[str, Any]]:
        with (out / "slime.jsonl").open() as f:
            for line in f:
                yield json.loads(line)

    count, first = 0, ""
    for _, data, check in paired("slime.jsonl", lines(), expected()):
        want = check.want
        unknown = sorted(set(data) - SLIME_SAMPLE_FIELDS)
        check.holds(f"fields slime's Sample does not have: {unknown}", not unknown)
        check.holds(
            f"status {data['status']!r} is no Sample.Status", data["status"] in SLIME_STATUSES
        )
        view = data
        if sample_class is not None:
            sample = sample_class.from_dict(data)
            view = {**vars(sample), "status": sample.status.value}
        response_length = view["response_length"]
        check.same("metadata.trace_id", view["metadata"]["trace_id"], want.trace_id)
        check.same("tokens", view["tokens"], want.prompt_ids + want.response_ids)
        check.same("response_length", response_length, len(want.response_ids))
        check.same("loss_mask", view["loss_mask"], want.loss_mask)
        check.same("rollout_log_probs", view["rollout_log_probs"], want.logprobs)
        check.holds(
            "len(loss_mask), len(rollout_log_probs) != response_length",
            len(view["loss_mask"]) == len(view["rollout_log_probs"]) == response_length,
        )
        check.same("reward", view["reward"], want.reward)
        versions = [] if want.policy_version is None else [str(want.policy_version)]
        check.same("weight_versions (policy version)", view["weight_versions"], versions)
        if not first:
            first = (
                f"status {view['status']}, tokens {len(view['tokens'])}, response_length "
                f"{response_length}, reward {view['reward']}, weight_versions "
                f"{view['weight_versions']}, group_index {view['group_index']}, rollout_id "
                f"{view['rollout_id']}"
            )
        count += 1
    how = (
        "reloaded by slime's Sample.from_dict"
        if sample_class is not None
        else "slime's documented Sample schema at 624b824a (slime does not import here)"
    )
    return f"{count} Samples = Polar's traces, {how}; first: {first}"


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("out", type=Path, help="a `polar export` directory")
    parser.add_argument("--traces", type=Path, action="append", help="Polar Trace JSONL")
    parser.add_argument("--model", type=Path, help="a model dir for TRL's SFTTrainer")
    parser.add_argument("--require", default="", help="trainers that must import: verl,trl")
    args = parser.parse_args(argv)
    required = {name for name in args.require.split(",") if name}
    if required - set(TRAINERS):
        parser.error(f"--require: unknown trainers {sorted(required - set(TRAINERS))}")
    traces = args.traces or [args.out / "traces.jsonl"]
    for path in traces:
        if not path.is_file():
            parser.error(f"no Polar traces at {path}: export with --format all, or give --traces")

    def expected() -> Iterator[Expected]:
        return read_expected(traces)

    checks: dict[str, Callable[[], str]] = {
        "verl": lambda: check_verl(args.out, expected),
        "trl": lambda: check_trl(args.out, expected, args.model),
        "slime": lambda: check_slime(args.out, expected),
    }
    failed = False
    for name, check in checks.items():
        try:
            print(f"{name}: {check()}", flush=True)
        except ImportError as exc:
            print(f"{name}: skipped ({exc})", flush=True)
            failed |= name in required
        except Mismatch as exc:
            print(f"{name}: MISMATCH: {exc}", flush=True)
            failed = True
        except (KeyError, TypeError, ValueError) as exc:  # a row the trainer cannot read
            print(f"{name}: UNREADABLE: {type(exc).__name__}: {exc}", flush=True)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

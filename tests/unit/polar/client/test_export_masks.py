"""One definition of a trace: every `polar export` format, read back, keeps each `Trace`'s
token ids, loss mask and logprobs token for token, and a column named `loss_mask` is over the
response (aligned with `Trace.response_ids`) in every format, as it is in the SDK."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest

from polar.client import export as ex
from polar.client.export import ExportFormat
from polar.records import Trace
from polar.trainers.slime_layout import SLIME_JSONL
from polar.trainers.trl.layout import TRL_JSONL
from polar.trainers.verl_layout import VERL_PARQUET
from tests.support.trace_samples import Holds, Over, expected, sdk_traces


@dataclass(frozen=True)
class Layout:
    """How to read one format back: its rows, each row's trace id, its per-token columns."""

    read: Callable[[Path], list[dict[str, Any]]]
    trace_id: Callable[[dict[str, Any]], str]
    columns: dict[str, tuple[Holds, Over]]


def jsonl(name: str) -> Callable[[Path], list[dict[str, Any]]]:
    return lambda out: [json.loads(line) for line in (out / name).read_text().splitlines()]


def hf_rows(out: Path) -> list[dict[str, Any]]:
    return [dict(row) for row in datasets.load_from_disk(str(out / ex.HF_DIR))]


def verl_rows(out: Path) -> list[dict[str, Any]]:
    return list(pq.read_table(out / VERL_PARQUET).to_pylist())


RL_COLUMNS: dict[str, tuple[Holds, Over]] = {
    "input_ids": ("ids", "sequence"),
    "loss_mask": ("mask", "response"),
    "response_logprobs": ("logprobs", "response"),
}
LAYOUTS: dict[ExportFormat, Layout | None] = {
    ExportFormat.JSONL: Layout(jsonl(ex.RL_JSONL), lambda r: r["trace_id"], RL_COLUMNS),
    ExportFormat.HF: Layout(hf_rows, lambda r: r["trace_id"], RL_COLUMNS),
    ExportFormat.SFT: None,  # messages only: no token ids, masks or logprobs
    ExportFormat.VERL: Layout(
        verl_rows,
        lambda r: r["extra_fields"]["trace_id"],
        {
            "prompt_ids": ("ids", "prompt"),
            "response_ids": ("ids", "response"),
            "response_mask": ("mask", "response"),
            "response_logprobs": ("logprobs", "response"),
        },
    ),
    ExportFormat.TRL: Layout(
        jsonl(TRL_JSONL),
        lambda r: r["trace_id"],
        {
            "input_ids": ("ids", "sequence"),
            "completion_mask": ("mask", "sequence"),  # TRL's own name for a whole-sequence mask
            "rollout_logprobs": ("logprobs", "sequence"),
        },
    ),
    ExportFormat.SLIME: Layout(
        jsonl(SLIME_JSONL),
        lambda r: r["metadata"]["trace_id"],
        {
            "tokens": ("ids", "sequence"),
            "loss_mask": ("mask", "response"),
            "rollout_log_probs": ("logprobs", "response"),
        },
    ),
}
"""Every export format, and where it keeps a trace's tokens (None: it keeps none)."""

PER_TOKEN = re.compile(r"mask|log_?probs?|_ids$|^tokens$")
"""Names of columns that hold one value per token (a list of numbers under such a name must
be declared in its layout's `columns`)."""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Trace], Path]:
    """The SDK's traces written as a Trace file, then exported from it in every format, as
    `polar export --traces FILE --format all` does."""
    out = tmp_path_factory.mktemp("export")
    traces = sdk_traces()
    source = out / "traces-source.jsonl"
    source.write_text("".join(t.model_dump_json() + "\n" for t in traces))
    collected = ex.collect_files([str(source)], None, with_records=False)
    ex.export_traces(collected.traces, out, ["all"], records=collected.records)
    return traces, out


def test_every_export_format_has_a_declared_layout() -> None:
    assert set(LAYOUTS) == set(ex.FORMAT_ORDER)


@pytest.mark.parametrize("fmt", [f for f, layout in LAYOUTS.items() if layout is not None])
def test_each_format_keeps_the_sdks_ids_masks_and_logprobs_token_for_token(
    fmt: ExportFormat, exported: tuple[list[Trace], Path]
) -> None:
    traces, out = exported
    layout = LAYOUTS[fmt]
    assert layout is not None
    rows = layout.read(out)
    assert [layout.trace_id(r) for r in rows] == [t.trace_id for t in traces]
    for trace, row in zip(traces, rows, strict=True):
        for column, (holds, over) in layout.columns.items():
            assert row[column] == expected(trace, holds, over), (fmt, trace.trace_id, column)
        undeclared = {
            name
            for name, value in row.items()
            if PER_TOKEN.search(name)
            and isinstance(value, list)
            and all(isinstance(v, int | float) for v in value)
            and name not in layout.columns
        }
        assert not undeclared, (fmt, undeclared)


@pytest.mark.parametrize("fmt", [f for f, layout in LAYOUTS.items() if layout is not None])
def test_loss_mask_is_over_the_response_wherever_it_appears(
    fmt: ExportFormat, exported: tuple[list[Trace], Path]
) -> None:
    """The name `loss_mask` means the SDK's `Trace.loss_mask` in every format; a mask over the
    whole sequence goes by another name (TRL's `completion_mask`)."""
    traces, out = exported
    layout = LAYOUTS[fmt]
    assert layout is not None
    for trace, row in zip(traces, layout.read(out), strict=True):
        if "loss_mask" in row:
            assert row["loss_mask"] == trace.loss_mask, (fmt, trace.trace_id)
    masks = [over for holds, over in layout.columns.values() if holds == "mask"]
    assert len(masks) == 1
    if layout.columns.get("loss_mask"):
        assert layout.columns["loss_mask"] == ("mask", "response")


def test_the_sft_view_holds_messages_only(exported: tuple[list[Trace], Path]) -> None:
    _, out = exported
    rows = jsonl(ex.SFT_JSONL)(out)
    assert rows, "the resolved session's single-call trace gives an SFT row"
    assert not {name for row in rows for name in row if PER_TOKEN.search(name)}

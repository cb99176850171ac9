"""scripts/check_trainer_layouts.py on a real export: TRL's own loading code (`load_dataset`,
`is_conversational`, `SFTTrainer`'s labels and collator) and slime's documented `Sample`
schema accept every row, and any row that drifts from Polar's traces fails the check."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.builders import (
    TINY_MODEL,
    tokenizer_dir_fixture,  # noqa: F401  (the tokenizer_dir fixture)
)
from tests.support.paths import REPO
from tests.support.sample_export import write_sample


def load_check() -> ModuleType:
    path = REPO / "scripts" / "check_trainer_layouts.py"
    spec = importlib.util.spec_from_file_location("check_trainer_layouts", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


check = load_check()


@pytest.fixture(scope="module")
def sample(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 4-session export of tests/integration/test_export.py and its Trace file
    (tests.support.sample_export)."""
    out = tmp_path_factory.mktemp("sample")
    write_sample(out, tokenizer_dir)
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, str]]:
    """The check's exit code and its line per trainer."""
    code = check.main(argv)
    lines = capsys.readouterr().out.splitlines()
    said = {line.split(":")[0]: line for line in lines if line.split(":")[0] in check.TRAINERS}
    return code, said


def test_trl_and_slime_take_every_row_as_polar_traced_it(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not (TINY_MODEL / ".complete").exists():
        pytest.skip("SFTTrainer needs the tiny model's weights (infra/setup.sh builds them)")
    traces = read_jsonl(sample / "polar-traces.jsonl")
    mask_ones = sum(sum(t["loss_mask"]) for t in traces)
    argv = [str(sample / "export"), "--traces", str(sample / "polar-traces.jsonl")]
    code, said = run([*argv, "--model", str(TINY_MODEL), "--require", "trl"], capsys)
    assert code == 0, said
    n = len(traces)
    assert n == 16 and mask_ones > 0
    assert said["trl"].startswith(f"trl: {n} rows = Polar's traces (file floats exact;")
    assert f"{n} with a conversational prompt and completion" in said["trl"]
    assert f"SFTTrainer prepared and collated {n} rows: {mask_ones} label tokens" in said["trl"]
    slime_how = (
        "reloaded by slime's Sample.from_dict"
        if check.slime_sample()
        else "slime's documented Sample schema at 624b824a"
    )
    assert said["slime"].startswith(f"slime: {n} Samples = Polar's traces, {slime_how}")
    # the export's own RL rows are the reference when no Trace file is given
    code, said = run([str(sample / "export")], capsys)
    assert code == 0 and f"trl: {n} rows" in said["trl"] and f"slime: {n} Samples" in said["slime"]


def test_a_trainer_that_must_import_and_does_not_fails_the_check(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, said = run([str(sample / "export"), "--require", "trl,verl"], capsys)
    if importlib.util.find_spec("verl") is None:
        assert code == 1 and said["verl"].startswith("verl: skipped (")
    else:
        assert code == 0 and "AgentLoopOutput rows = Polar's traces" in said["verl"]
    with pytest.raises(SystemExit):
        check.main([str(sample / "export"), "--require", "torchtune"])
    with pytest.raises(SystemExit):
        check.main([str(sample / "export"), "--traces", str(sample / "missing.jsonl")])


def first_trained(row: dict[str, Any], mask_key: str) -> int:
    return row[mask_key].index(1)


def trl_mask(row: dict[str, Any]) -> None:
    i = first_trained(row, "completion_mask")
    row["completion_mask"][i] = 0


def trl_logprob(row: dict[str, Any]) -> None:
    row["rollout_logprobs"][first_trained(row, "completion_mask")] += 1e-9


def trl_token(row: dict[str, Any]) -> None:
    row["input_ids"][first_trained(row, "completion_mask")] += 1


def slime_logprob(row: dict[str, Any]) -> None:
    row["rollout_log_probs"][first_trained(row, "loss_mask")] -= 1e-9


def slime_mask(row: dict[str, Any]) -> None:
    row["loss_mask"][first_trained(row, "loss_mask")] = 0


Mutation = Callable[[dict[str, Any]], None]
DRIFTS: list[tuple[str, Mutation, str]] = [
    ("trl.jsonl", trl_mask, "completion_mask (loss mask): at ["),
    ("trl.jsonl", trl_logprob, "rollout_logprobs (in the file): at ["),
    ("trl.jsonl", trl_token, "input_ids: at ["),
    ("trl.jsonl", lambda r: r.update(reward=0.5), "reward (in the file)"),
    ("trl.jsonl", lambda r: r.update(policy_version=8), "policy_version: the trainer sees 8"),
    ("slime.jsonl", slime_mask, "loss_mask: at ["),
    ("slime.jsonl", slime_logprob, "rollout_log_probs: at ["),
    ("slime.jsonl", lambda r: r.update(reward=0.5), "reward: the trainer sees 0.5"),
    ("slime.jsonl", lambda r: r.update(weight_versions=["8"]), "weight_versions (policy"),
    ("slime.jsonl", lambda r: r.update(advantage=1.0), "Sample does not have: ['advantage']"),
    ("slime.jsonl", lambda r: r.update(status="done"), "status 'done' is no Sample.Status"),
    ("slime.jsonl", lambda r: r["tokens"].pop(), "tokens: the trainer sees"),
]


@pytest.mark.parametrize(
    ("layout", "drift", "said"), DRIFTS, ids=[f"{f}-{s[:24]}" for f, _, s in DRIFTS]
)
def test_a_row_that_drifts_from_polar_traces_fails_with_where(
    layout: str,
    drift: Mutation,
    said: str,
    sample: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "export"
    shutil.copytree(sample / "export", out)
    rows = read_jsonl(out / layout)
    drift(rows[2])
    (out / layout).write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, lines = run([str(out), "--traces", str(sample / "polar-traces.jsonl")], capsys)
    trainer = layout.split(".")[0]
    assert code == 1
    assert lines[trainer].startswith(f"{trainer}: MISMATCH: {layout} row 2 (trace "), lines
    assert said in lines[trainer]
    other = "slime" if trainer == "trl" else "trl"
    assert "MISMATCH" not in lines[other]


def test_a_missing_row_fails_the_check(
    sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "export"
    shutil.copytree(sample / "export", out)
    lines = (out / "slime.jsonl").read_text().splitlines(keepends=True)
    (out / "slime.jsonl").write_text("".join(lines[:-1]))
    code, said = run([str(out), "--traces", str(sample / "polar-traces.jsonl")], capsys)
    assert code == 1
    assert said["slime"] == (
        f"slime: MISMATCH: slime.jsonl has fewer rows than Polar's traces (at row {len(lines) - 1})"
    )


def test_rl_rows_with_a_whole_sequence_loss_mask_are_refused_as_the_reference(
    sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loss_mask` is over the response in traces.jsonl too: a row whose mask covers the prompt
    (an export from before that was settled) is not read as Polar's traces."""
    out = tmp_path / "export"
    shutil.copytree(sample / "export", out)
    rows = read_jsonl(out / "traces.jsonl")
    for row in rows:
        row["loss_mask"] = [0] * row["prompt_length"] + row["loss_mask"]
    (out / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, said = run([str(out)], capsys)
    assert code == 1
    assert "loss_mask has" in said["slime"] and "(it is over the response part)" in said["slime"]

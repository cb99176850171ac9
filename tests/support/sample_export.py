"""The sample export the trainer-layout check runs on: the 4 sessions of
tests/integration/test_export.py.

    .venv/bin/python -m tests.support.sample_export OUT [--model DIR]

writes OUT/export (`polar export --format all` of prefix_merging traces of a
realistic agent session, with the tiny model's tokenizer) and
OUT/polar-traces.jsonl (Polar's `Trace` lines), which
`scripts/check_trainer_layouts.py OUT/export --traces OUT/polar-traces.jsonl`
compares the trainers' views with (`scripts/setup_trainer_venv.sh` does both).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from polar.client import export as ex

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = REPO / ".polar" / "models" / "tiny-qwen3"


def write_sample(out: Path, model: Path) -> Path:
    """The 4-session export of tests/integration/test_export.py (prefix_merging) under `out`;
    its Trace file."""
    from tests.integration import test_export as te

    records = te.realistic_records(model)
    traces = te.build(records, "prefix_merging", model)
    traces_file = out / "polar-traces.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    traces_file.write_text("".join(t.model_dump_json() + "\n" for t in traces))
    summary = ex.export_traces(traces, out / "export", ["all"], records=te.all_records(records))
    print(
        f"sample: {summary.traces} traces of {summary.sessions} sessions exported to "
        f"{out / 'export'} ({', '.join(sorted(summary.files))}); Polar's traces: {traces_file}"
    )
    return traces_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("out", type=Path, help="where to write export/ and polar-traces.jsonl")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="a tokenizer dir")
    args = parser.parse_args(argv)
    write_sample(args.out, args.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())

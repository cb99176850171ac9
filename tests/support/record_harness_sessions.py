"""Re-record the benchmark's real harness sessions (bench/data/{harness}.jsonl.xz).

    .venv/bin/python -m tests.support.record_harness_sessions [--data bench/data]

Each CLI (Codex, Claude Code, Qwen Code, Pi; infra/harnesses/install.sh) runs
once exactly as tests/system/test_harness_clis.py runs it: a fresh HOME and git repo
with a bug, an in-thread gateway with a minted session key in front of the
agent backend (tests/support/agent_backend.py), SeaweedFS started for the run.
The records read back from S3 are written slimmed (`bench.bench_builders.slim`)
and xz-compressed, with the versions and run summaries in `recorded.json`.
This is test machinery (it drives the test's harness helper), so it lives with
the tests; bench/bench_builders.py only reads the files it writes.
"""

from __future__ import annotations

import argparse
import json
import lzma
import secrets
import tempfile
import time
from pathlib import Path

from _pytest.outcomes import OutcomeException

from activities.harnesses import CLI_ADAPTERS
from app.devstack import DevStack
from bench.bench_builders import DATA, slim
from bench.tiny_backend import TINY_MODEL
from polar.settings import Settings
from polar.storage import Storage
from tests.support.ports import free_port
from tests.system.test_harness_clis import run_harness

# harness kind -> the name of its recorded session file in bench/data/
HARNESS_ORDER = {"codex": "codex", "claude_code": "claude", "qwen_code": "qwen", "pi": "pi"}


def record_harnesses(out_dir: Path) -> dict[str, str]:
    """Run each CLI once through an in-thread gateway (as tests/system/test_harness_clis.py
    does)."""
    work = Path(tempfile.mkdtemp(prefix="polar-bench-"))
    base = free_port(span=48)
    settings = Settings(
        data_dir=work / "data",
        temporal_address=f"127.0.0.1:{base}",
        s3_endpoint=f"http://127.0.0.1:{base + 30}",
        s3_bucket="polar-bench",
        gateway_port=base + 40,
        vllm_port=base + 41,
        session_secret=secrets.token_urlsafe(32),
    )
    stack = DevStack(settings, with_model=False, workers=0, die_with_parent=True)
    settings = stack.settings  # with the stack's generated S3 keys
    stack.start(stack.seaweedfs())
    outcome: dict[str, str] = {}
    try:
        storage = Storage(settings)
        storage.ensure_bucket()
        out_dir.mkdir(parents=True, exist_ok=True)
        for kind, harness in HARNESS_ORDER.items():
            try:
                run = run_harness(kind, work / harness, settings, storage, TINY_MODEL)
            except OutcomeException as exc:  # pytest.skip / pytest.fail inside the helper
                outcome[harness] = f"not recorded: {exc.msg}"
                continue
            if run.returncode != 0 or not run.records:
                outcome[harness] = f"not recorded: rc={run.returncode}, {len(run.records)} records"
                continue
            lines = "".join(json.dumps(slim(r)) + "\n" for r in run.records)
            (out_dir / f"{harness}.jsonl.xz").write_bytes(lzma.compress(lines.encode()))
            adapter = CLI_ADAPTERS[kind]
            version = adapter.installed_version(settings.harness_bin_dir)
            outcome[harness] = f"{adapter.package}@{version}: " + run.describe()
    finally:
        stack.stop("seaweedfs", quiet=True)
    manifest = {"date": time.strftime("%Y-%m-%d"), "sessions": outcome}
    (out_dir / "recorded.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="where the sessions go")
    args = parser.parse_args()
    for harness, outcome in record_harnesses(args.data).items():
        print(f"{harness}: {outcome}")


if __name__ == "__main__":
    main()

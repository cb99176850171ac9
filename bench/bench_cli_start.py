"""How fast `polar` starts: the commands a script runs most, as separate processes.

    .venv/bin/python bench/bench_cli_start.py               # 10 runs of each
    .venv/bin/python bench/bench_cli_start.py --runs 30 --label quiet

Runs `polar --help`, `polar status --help` and `polar status <id>` (and the floor of any
command that talks to Temporal: `TEMPORAL_FLOOR`) against a Temporal address nothing answers
on (the CLI's whole start up to its first RPC, which fails at once: exit 1), each `--runs`
times one after another, and prints the median and p90 wall time and the median user+system
CPU time per command (CPU time is what a loaded machine cannot hide).
Also the import time of `app.cli` alone (`python -X importtime`). Keeps the figures in
bench/results/cli_start.json under `--label` (other labels stay).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
POLAR = [sys.executable, "-m", "app.cli"]
RESULTS = REPO / "bench" / "results" / "cli_start.json"


TEMPORAL_FLOOR = """
import asyncio
import typer
from temporalio.service import ConnectConfig, ServiceClient
from polar.settings import ClientSettings, get_settings

async def connect():
    settings = get_settings(ClientSettings)
    try:
        await ServiceClient.connect(ConnectConfig(target_host=settings.temporal_address))
    except Exception:
        raise SystemExit(1)

asyncio.run(connect())
"""
"""The least any `polar` command that talks to Temporal does: typer, the Temporal SDK's
service client (`import temporalio` loads its bridge and every API proto), the settings, a
connect (which fails at once here)."""


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, cpu s, exit code) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    code = subprocess.run(argv, env=env, capture_output=True, check=False).returncode
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, code


def import_seconds(env: dict[str, str]) -> float:
    """`app.cli`'s cumulative import time, as `python -X importtime` reports it."""
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import app.cli"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    match = re.search(r"\|\s*(\d+) \| app\.cli$", err, re.MULTILINE)
    return int(match.group(1)) / 1e6 if match else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--label", default="default")
    args = parser.parse_args()
    env = {**os.environ, "POLAR_TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port()}"}
    commands = {
        "polar --help": [*POLAR, "--help"],
        "polar status --help": [*POLAR, "status", "--help"],
        "polar status ID (no Temporal)": [*POLAR, "status", "task-bench-cli-start"],
        "Temporal SDK floor": [sys.executable, "-c", TEMPORAL_FLOOR],
    }
    figures: dict[str, dict[str, float]] = {}
    print(f"{'command':32} {'median s':>9} {'p90 s':>7} {'cpu s':>7}  exit")
    for name, argv in commands.items():
        runs = [timed(argv, env) for _ in range(args.runs)]
        walls = sorted(r[0] for r in runs)
        row = {
            "median_s": round(statistics.median(walls), 3),
            "p90_s": round(walls[int(0.9 * (len(walls) - 1))], 3),
            "cpu_s": round(statistics.median(r[1] for r in runs), 3),
        }
        figures[name] = row
        codes = sorted({r[2] for r in runs})
        print(f"{name:32} {row['median_s']:9.3f} {row['p90_s']:7.3f} {row['cpu_s']:7.3f}  {codes}")
    figures["import app.cli"] = {"median_s": round(import_seconds(env), 3)}
    print(f"{'import app.cli':32} {figures['import app.cli']['median_s']:9.3f}")
    load = os.getloadavg()[0]
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    saved[args.label] = {"runs": args.runs, "load_1min": round(load, 2), "figures": figures}
    RESULTS.write_text(json.dumps(saved, indent=2) + "\n")
    print(f"load average {load:.2f}; kept in {RESULTS.relative_to(REPO)} as {args.label!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

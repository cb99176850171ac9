"""The chaos soak (issue 22, item 3): a long task on the real stack while faults hit it.

    nice .venv/bin/python -m tests.support.chaos_soak --sessions 300 --minutes 40 --seed 0

Starts a Temporal dev server and SeaweedFS of its own (state in a temp dir), then runs
tests/support/chaos.py's soak: a gateway and a worker process in front of two fake
inference replicas, one task of `--sessions` fault-agent sessions in the `local`
runtime, every fault injected once at a seeded random point of its progress. Prints
the markdown table (fault, times injected, sessions affected, their outcomes, retries,
lost / duplicated records, leaked runtimes) and writes it with the details to
bench/results/chaos_soak.json. Exits 1 when an invariant does not hold.

It lives beside its engine, under tests/support (benchmarks import no test module, and the
soak is built of the test suite's real-stack parts: nodes, scripted backends, the fault
agent); its results go to bench/results like every benchmark's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path

from tests.support.chaos import FAULTS, SoakConfig, bench_stack, soak
from tests.support.paths import REPO

RESULTS = REPO / "bench" / "results" / "chaos_soak.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--minutes", type=float, default=40.0, help="the task's time bound")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-run", type=int, default=8, help="the worker's harness cap")
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated subset")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, state)")
    args = parser.parse_args()
    config = SoakConfig(
        sessions=args.sessions,
        minutes=args.minutes,
        seed=args.seed,
        max_run=args.max_run,
        faults=tuple(f for f in args.faults.split(",") if f),
    )
    unknown = set(config.faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
    work = Path(tempfile.mkdtemp(prefix="polar-soak-"))
    work.chmod(0o711)  # the sandbox users reach their session dirs below it
    stack = bench_stack(work)
    try:
        report = asyncio.run(soak(stack, work / "soak", config))
    finally:
        for name in ("temporal", "seaweedfs"):
            stack.stop(name, quiet=True, grace_s=0)
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(report.table())
    print()
    print(report.summary())
    for line in report.violations + report.replay_failures:
        print(f"  ! {line}")
    for line in report.leaked_dirs + report.leaked_processes:
        print(f"  ! leaked: {line}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report.to_json() | {"table": report.table()}, indent=1) + "\n")
    ok = (
        report.finished
        and not (report.violations or report.replay_failures or report.leaked_dirs)
        and not report.leaked_processes
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

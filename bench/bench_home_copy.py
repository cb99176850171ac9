"""What a big HOME costs a Docker session: each command copies HOME in and back out.

The docker runtime mirrors the session's HOME (and scratch dir) into the container
before every command and back to the worker after it (`DockerRuntime._sync_in` and
`_sync_out`: a tar stream each way through the engine's API), so every command of a
session pays for HOME's size twice. This times one `true` command against HOMEs of
growing size (files of 1 MiB, incompressible) and writes `bench/results/home-copy.json`.

    .venv/bin/python bench/bench_home_copy.py            # 0, 16, 64, 256 MiB; about a minute
    .venv/bin/python bench/bench_home_copy.py --sizes 0,512

Needs a running Docker engine and the local `polar/runtime:py311` image
(`python infra/images/build.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from activities.runtimes.kinds.docker import DockerRuntime
from polar.contracts import PrepareRequest
from polar.tasks.spec import RuntimeSpec

RESULTS = Path(__file__).parent / "results" / "home-copy.json"


async def time_commands(runtime: DockerRuntime, size_mib: int, runs: int) -> dict[str, float]:
    spec = RuntimeSpec.model_validate({"kind": "docker", "image": "polar/runtime:py311"})
    handle = await runtime.prepare(
        PrepareRequest(session_id=f"home-{size_mib}", task_id="bench", runtime=spec)
    )
    try:
        home = runtime.home(handle)
        for i in range(size_mib):
            (home / f"blob-{i:04}").write_bytes(os.urandom(1 << 20))
        laps = []
        for n in range(runs):
            started = time.monotonic()
            outcome = await runtime.run(handle, "true", env={}, log_name=f"true-{n}", timeout_s=600)
            laps.append(time.monotonic() - started)
            assert outcome.exit_code == 0, outcome
        return {"home_mib": size_mib, "median_s": statistics.median(laps), "min_s": min(laps)}
    finally:
        await runtime.teardown(handle)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,16,64,256", help="HOME sizes in MiB")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="polar-bench-home-") as tmp:
        runtime = DockerRuntime(Path(tmp) / "runtimes")
        for size in (int(s) for s in args.sizes.split(",")):
            row = await time_commands(runtime, size, args.runs)
            rows.append(row)
            print(
                f"HOME {size:>5} MiB: one command {row['median_s']:.2f} s (min {row['min_s']:.2f})"
            )
    base = rows[0]["median_s"] if rows and rows[0]["home_mib"] == 0 else None
    if base is not None:
        for row in rows[1:]:
            extra = row["median_s"] - base
            per_mib = row["extra_s_per_mib"] = extra / row["home_mib"]
            print(f"  {row['home_mib']} MiB: +{extra:.2f} s, {per_mib * 1e3:.1f} ms/MiB")
    load = {"before": load_before, "after": os.getloadavg()[0]}
    RESULTS.write_text(json.dumps({"load_average": load, "rows": rows}, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    asyncio.run(main())

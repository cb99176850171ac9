"""A script that only connects the SDK and returns exits 0, every time.

The Temporal SDK's Rust side used to take the GIL from a runtime thread while the
interpreter finalised, killing 1 in 4 to 1 in 6 such scripts with `Fatal Python error:
PyGILState_Release` or SIGSEGV after their work was done (polar/temporal_client.py,
`collect_before_finalising`). 20 runs: the old client passed all 20 about 1 time in 40.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from app.devstack import DevStack

RUNS = 20

SCRIPT = """
import asyncio
from polar.client.sdk import PolarClient

async def main() -> None:
    await PolarClient.connect()

asyncio.run(main())
"""


def test_a_connect_and_return_script_exits_0_every_time(devstack: DevStack) -> None:
    settings = devstack.settings
    env = {
        **os.environ,
        "POLAR_TEMPORAL_ADDRESS": settings.temporal_address,
        "POLAR_TEMPORAL_NAMESPACE": settings.temporal_namespace,
    }

    def run(_: int) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", SCRIPT]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(run, range(RUNS)))
    failed = [(r.returncode, r.stderr[-400:]) for r in runs if r.returncode != 0]
    assert not failed, f"{len(failed)} of {RUNS} runs did not exit 0: {failed[:3]}"

"""The CLI exits with its command's code, never 134 at interpreter shutdown.

`polar result --json` and `polar submit` used to exit 134 (`Fatal Python
error: PyGILState_Release`) after a complete result, about 4 runs in 100: the
Temporal SDK's Tokio threads calling into a finalising interpreter
(temporalio/sdk-python#300). Here, as separate processes against the real
stack: `polar result --json` of a finished task a few times (exit 0 and a
complete TaskResult each time; bench/bench_cli_exit.py runs it 200 times), a
`polar submit` that follows its task to the end, and a command that fails after
using the client keeps its own exit code. The worker runs in this process's event
loop: the CLI processes are awaited in threads.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from app.devstack import DevStack
from bench.bench_cli_exit import POLAR, one_session_task, run_cli
from polar.client.sdk import PolarClient
from polar.tasks.spec import TaskSpec
from tests.support.ports import free_port

pytestmark = pytest.mark.slow


def _env(devstack: DevStack) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("POLAR_")} | devstack.env()


async def test_result_json_exits_0_every_time(polar: PolarClient, devstack: DevStack) -> None:
    spec = TaskSpec.model_validate(one_session_task("cli-exit-result"))
    run = await polar.submit(spec)
    await polar.wait(run, timeout_s=300)
    argv = [*POLAR, "result", "--json", run.workflow_id]
    outcomes = [
        await asyncio.to_thread(run_cli, argv, _env(devstack), want_json=True) for _ in range(10)
    ]
    assert [(code, kind) for code, kind, _ in outcomes] == [(0, "clean")] * 10


async def test_submit_follows_to_the_end_and_exits_0(
    polar: PolarClient, devstack: DevStack, tmp_path: Path
) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps(one_session_task("cli-exit-submit")))
    proc = await asyncio.to_thread(
        subprocess.run,
        [*POLAR, "submit", str(task)],
        env=_env(devstack),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mean reward" in proc.stdout and "completed" in proc.stdout, proc.stdout


async def test_a_failing_command_keeps_its_exit_code(
    polar: PolarClient, devstack: DevStack
) -> None:
    proc = await asyncio.to_thread(
        subprocess.run,
        [*POLAR, "status", "no-such-workflow-id"],
        env=_env(devstack),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "PyGILState_Release" not in proc.stderr
    # the user's situation is said in one line, not a traceback
    assert "polar: not found" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_no_temporal_is_said_plainly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLAR_")}
    env |= {"POLAR_DATA_DIR": str(tmp_path), "POLAR_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}
    proc = subprocess.run(
        [*POLAR, "status", "any"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert "cannot reach Temporal" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr

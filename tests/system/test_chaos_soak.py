"""The chaos soak, short (issue 22, item 3): every fault once on a small task.

The same engine as `python -m tests.support.chaos_soak` (tests/support/chaos.py) on the suite's
Temporal and SeaweedFS: a gateway and a worker process in front of two fake
inference replicas, 36 fault-agent sessions in the `local` runtime, each fault
injected once at a seeded random point of the first 15% of the task's progress
(a worker SIGKILLed in init, run and postrun; the gateway SIGKILLed and restarted;
one replica SIGKILLed; S3 stopped for 20 s; the Temporal dev server restarted; the
runtimes tmpfs filled; one harness's sandbox start failed; dockerd's restart is
skipped, saying why: these sessions are local). Then every invariant of the soak:
each session ok, or `infra_error` with a reason true to a fault that hit it; no
answer lost or duplicated between the harness, S3 and the traces; no runtime dir or
sandbox user's process left; every history of the task replays.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.devstack import DevStack
from tests.support.chaos import FAULTS, SoakConfig, soak

pytestmark = pytest.mark.slow

ROOT_ONLY = frozenset({"disk_full", "sandbox_start"})


async def test_every_fault_once_loses_and_misclassifies_nothing(
    devstack: DevStack, tmp_path: Path
) -> None:
    config = SoakConfig(
        sessions=36,
        minutes=5.5,
        seed=22,
        turns=4,
        pause_s=2.5,
        max_run=4,
        replica_down_s=8,
        spread=(0.0, 0.15),
        early=("worker_kill_init",),
        uid_pool="61900-61999",
        progress=False,
    )
    report = await soak(devstack, tmp_path / "soak", config)
    print(report.table())
    print(report.summary())
    for injection in report.injections:
        print(injection)

    assert report.finished, report.violations
    assert report.sessions == config.sessions
    assert report.violations == [], "\n".join(report.violations)
    assert report.replay_failures == []
    assert report.histories >= config.sessions + 1
    assert report.leaked_dirs == [] and report.leaked_processes == []
    assert report.lost == 0 and report.duplicated == 0
    assert report.answered > 0 and report.recorded >= report.answered
    skipped = {row.fault: row.skipped for row in report.rows if row.skipped}
    expected = {"dockerd_restart"} | (ROOT_ONLY if os.geteuid() != 0 else set())
    assert set(skipped) == expected, skipped
    for row in report.rows:
        assert row.injected == (0 if row.fault in expected else 1), row
    injected = {row.fault: row for row in report.rows if row.injected}
    assert set(injected) == set(FAULTS) - expected
    for fault in ("worker_kill_init", "worker_kill_run", "worker_kill_postrun"):
        stage = fault.rsplit("_", 1)[1]
        assert injected[fault].stages.get(stage, 0) >= 1, (fault, injected[fault].stages)
    if "sandbox_start" in injected:  # the session whose harness never started ran again
        assert injected["sandbox_start"].retries >= 1, injected["sandbox_start"]

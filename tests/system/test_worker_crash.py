"""A worker killed while its harness runs: the session completes on a new worker, nothing lost."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.cli.demo import demo_task
from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.temporal_client import connect

pytestmark = pytest.mark.slow


async def test_worker_killed_mid_harness_session_completes_without_loss(
    devstack: DevStack, gateway: str
) -> None:
    # a queue of its own, served only by the worker process this test kills
    settings = devstack.settings.model_copy(update={"task_queue": "polar-crash"})
    stack = DevStack(settings, with_model=False, workers=1, die_with_parent=True)
    first = stack.worker()
    stack.start(first)
    polar = PolarClient(await connect(settings), settings)

    spec = demo_task(sessions=1).model_copy(deep=True)
    spec.harness.env = {"DEMO_TURNS": "6", "DEMO_PAUSE_S": "1.5", "DEMO_STREAM_TURNS": ""}
    spec.timeouts.heartbeat_s = 5
    run = await polar.submit(spec)

    # wait until the harness has made some calls, then kill the worker hard
    session_id = None
    deadline = time.monotonic() + 300  # a loaded machine (full suite) is slow to start it
    while time.monotonic() < deadline:
        status = await polar.status(run)
        if status.sessions:
            session_id = status.sessions[0].session_id
            if polar.storage.count_completions(session_id) >= 2:
                break
        await asyncio.sleep(0.3)
    else:
        gateway_log = (settings.data_dir / "run" / "gateway.log").read_text(errors="replace")
        raise AssertionError(
            f"session {session_id} made fewer than 2 calls in 300 s; "
            f"status: {await polar.status(run)}; gateway log: {gateway_log[-2000:]}"
        )
    stack.kill("worker")  # gone before the restart below (a dying one would look alive)
    killed_at = time.time_ns()
    before = {r.record_id for r in polar.storage.list_completions(session_id)}
    assert len(before) >= 2

    stack.start(first)  # a fresh worker process on the same queue
    try:
        # 96 s alone; a loaded 2-core CI box has needed more than 240 s
        result = await polar.wait(run, timeout_s=480)
    except TimeoutError:
        status = await polar.status(run)
        log = (settings.data_dir / "run" / "worker.log").read_text(errors="replace")[-3000:]
        raise AssertionError(
            f"no result after 480 s; sessions: {status}; worker log: {log}"
        ) from None
    finally:
        stack.stop("worker", quiet=True)

    session = result.sessions[0]
    assert session.status == SessionStatus.COMPLETED, session.error
    records = polar.storage.list_completions(session_id)
    ids = [r.record_id for r in records]
    assert len(ids) == len(set(ids))
    assert before <= set(ids), "a completion recorded before the crash was lost"
    # the harness of attempt 1 died with its worker; attempt 2 ran to the end
    attempts = {r.attempt for r in records}
    assert attempts == {1, 2}
    assert not [r for r in records if r.attempt == 1 and r.seq > killed_at + 2_000_000_000]
    assert len([r for r in records if r.attempt == 2]) == 6
    # every recorded call, from both attempts, became a trace
    traces = polar.load_traces(session)
    assert sorted(rid for t in traces for rid in t.provenance.record_ids) == sorted(ids)

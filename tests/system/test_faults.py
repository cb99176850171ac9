"""Faults, each shown to lose no completion.

* a worker process SIGKILLed in each stage (init: a slow prepare action;
  run: mid-harness; postrun: a slow evaluator), then restarted: the stage's
  activity is retried (attempt 2 in the history, on the new process) and the
  session completes with every completion recorded exactly once;
* the gateway SIGKILLed during a model call and restarted on the same port:
  the harness's SDK retries go through; every answer the harness saw is in S3
  exactly once;
* S3 (SeaweedFS) stopped for a while: the gateway answers 503
  `recording_failed` (nothing answered unrecorded), the SDK retries, and once
  S3 is back the session completes with every answered call recorded;
* the Temporal dev server stopped and restarted on its SQLite file: the worker
  reconnects and the session resumes from the persisted history.

Every test uses its own task queue, its own node (gateway + worker processes)
and a fake backend that always answers, so it needs no model.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from tests.support.faults import Node, activity_runs, answered, fault_task, single_node
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow

STAGE_ACTIVITY = {"init": "prepare_runtime", "run": "run_harness", "postrun": "evaluate"}


def _slow_once(marks: Path, name: str) -> str:
    """Shell: note each run in {name}.runs; the first run hangs (until its worker is killed).

    The first run marks itself slow before it counts itself: the test kills the worker
    as soon as it sees a run counted, and that kill may end the command at once."""
    slow, runs = f"{marks}/{name}.slow", f"{marks}/{name}.runs"
    return (
        f"if [ ! -e {slow} ]; then touch {slow}; echo run >> {runs}; sleep 120; "
        f"else echo run >> {runs}; fi"
    )


def _runs(marks: Path, name: str) -> int:
    path = marks / f"{name}.runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _assert_nothing_lost(polar: PolarClient, session, log: Path, turns: int) -> None:
    """Each answer the harness saw is recorded exactly once; every record became a trace."""
    records = polar.storage.list_completions(session.session_id)
    ids = [r.record_id for r in records]
    assert len(ids) == len(set(ids)), "a completion was recorded twice"
    seen = [a["id"] for a in answered(log) if a["session_id"] == session.session_id]
    by_response = [r.response.get("id") for r in records if r.response]
    for rid in seen:
        assert by_response.count(rid) == 1, f"answer {rid} recorded {by_response.count(rid)}x"
    last_attempt = max(r.attempt for r in records)
    assert len([r for r in records if r.attempt == last_attempt]) == turns
    traces = polar.load_traces(session)
    assert sorted(x for t in traces for x in t.provenance.record_ids) == sorted(ids)


@pytest.mark.parametrize("stage", ["init", "run", "postrun"])
async def test_worker_killed_in_each_stage_retries_and_loses_nothing(
    devstack: DevStack, tmp_path: Path, stage: str
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    marks.chmod(0o777)  # written by prepare and evaluator commands (unprivileged users)
    for name in ("prepare", "evaluate"):  # the session's and its evaluator's: two pool uids
        (marks / f"{name}.runs").touch()
        (marks / f"{name}.runs").chmod(0o666)
    log = tmp_path / "answers.jsonl"
    turns = 4
    async with single_node(devstack.settings, tmp_path, f"polar-kill-{stage}") as (
        backend,
        node,
        polar,
    ):
        evaluator = "test -s answer.txt"
        spec = fault_task(
            f"kill-{stage}",
            turns=turns,
            log=log,
            heartbeat_s=5,
            pause_s=1.0 if stage == "run" else 0.0,
            prepare=_slow_once(marks, "prepare") if stage == "init" else None,
            evaluator=(
                f"{_slow_once(marks, 'evaluate')}; {evaluator}" if stage == "postrun" else evaluator
            ),
        )
        run = await polar.submit(spec)
        if stage == "run":
            await wait_for(lambda: len(answered(log)) >= 2, 120, "two answered calls")
        else:
            name = "prepare" if stage == "init" else "evaluate"
            await wait_for(lambda: _runs(marks, name) >= 1, 120, f"the {name} to start")
        first = node.kill("worker")
        session_id = await _session_id(polar, run)
        before = {r.record_id for r in polar.storage.list_completions(session_id)}
        node.start_worker()  # a fresh process on the same queues
        second = node.pid("worker")
        result = await polar.wait(run, timeout_s=240)

    session = result.sessions[0]
    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.reward == 1.0
    runs = [
        r
        for r in await activity_runs(polar.client, session.session_id)
        if r.activity == STAGE_ACTIVITY[stage]
    ]
    assert [r.attempt for r in runs] == [2], runs
    assert runs[0].identity.startswith(f"{second}@"), (runs, first, second)
    records = polar.storage.list_completions(session.session_id)
    kept = {r.record_id for r in records}
    assert before <= kept, "a completion recorded before the kill was lost"
    if stage == "run":
        assert {r.attempt for r in records} == {1, 2}
    else:
        assert {r.attempt for r in records} == {1}
        assert len(records) == turns
        # the killed run and its retry; the evaluator's fresh runtime runs the task's
        # prepare actions once more (the source plus the harness's diff, graded apart)
        expected = {"init": 3, "postrun": 2}[stage]
        name = "prepare" if stage == "init" else "evaluate"
        assert _runs(marks, name) == expected
    _assert_nothing_lost(polar, session, log, turns)


async def _session_id(polar: PolarClient, run) -> str:  # noqa: ANN001
    """The id of the task's first session, once the task has started it."""
    started: list[str] = []

    async def has_started() -> bool:
        started[:] = [s.session_id for s in (await polar.status(run)).sessions]
        return bool(started)

    await wait_for(has_started, 60, "the task to start its session", every_s=0.3)
    return started[0]


async def test_gateway_restarted_mid_call_loses_and_duplicates_nothing(
    devstack: DevStack, tmp_path: Path
) -> None:
    log = tmp_path / "answers.jsonl"
    turns = 5
    async with single_node(devstack.settings, tmp_path, "polar-gw-restart", delay_s=1.5) as (
        backend,
        node,
        polar,
    ):
        run = await polar.submit(fault_task("gw-restart", turns=turns, log=log, heartbeat_s=10))
        # kill the gateway while it waits on the backend for the harness's 2nd call
        await wait_for(
            lambda: len(answered(log)) >= 1 and backend.in_flight >= 1,
            120,
            "a call in flight after the first answer",
        )
        node.kill("gateway")
        calls_at_kill = backend.calls
        await asyncio.sleep(2)  # the harness's SDK meets a dead port and backs off
        node.start_gateway()  # same port, a new process (a new gateway_id)
        result = await polar.wait(run, timeout_s=240)

    session = result.sessions[0]
    assert session.status == SessionStatus.COMPLETED, session.error
    records = polar.storage.list_completions(session.session_id)
    # one harness attempt; the call cut off by the kill was never recorded nor answered,
    # its retry was: exactly `turns` records, on both gateway processes
    assert {r.attempt for r in records} == {1}
    assert len(records) == turns
    assert len({r.gateway_id for r in records}) == 2
    assert backend.calls == turns + 1 and calls_at_kill >= 2
    assert len(answered(log)) == turns
    _assert_nothing_lost(polar, session, log, turns)


async def test_s3_unreachable_for_a_while_gateway_503s_then_nothing_lost(
    devstack: DevStack, tmp_path: Path
) -> None:
    log = tmp_path / "answers.jsonl"
    turns = 6
    async with single_node(devstack.settings, tmp_path, "polar-s3-outage", delay_s=0.2) as (
        backend,
        node,
        polar,
    ):
        try:
            spec = fault_task("s3-outage", turns=turns, log=log, pause_s=0.5, heartbeat_s=30)
            run = await polar.submit(spec)
            await wait_for(lambda: len(answered(log)) >= 2, 120, "two answered calls")
            devstack.stop("seaweedfs", quiet=True)
            answered_at_stop = len(answered(log))
            # while S3 is down the gateway answers 503 recording_failed: nothing unrecorded
            await wait_for(lambda: _recording_failures(node) >= 1, 60, "a 503 recording_failed")
            answered_during = len(answered(log)) - answered_at_stop
            await asyncio.sleep(3)
            devstack.start(devstack.seaweedfs(), log=lambda _: None)  # same data dir and port
            result = await polar.wait(run, timeout_s=240)
        finally:
            if devstack.pid("seaweedfs") is None:
                devstack.start(devstack.seaweedfs(), log=lambda _: None)

    session = result.sessions[0]
    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.reward == 1.0
    assert answered_during <= 1  # at most the call whose record was written just before the stop
    records = polar.storage.list_completions(session.session_id)
    assert {r.attempt for r in records} == {1}  # the harness was not restarted
    assert len(records) == turns == len(answered(log))
    assert backend.calls > turns  # the 503'd calls reached the backend and were retried
    _assert_nothing_lost(polar, session, log, turns)


def _recording_failures(node: Node) -> float:
    try:
        text = httpx.get(f"{node.admin_url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("polar_gateway_recording_failures") and "_created" not in line
    )


async def test_temporal_restarted_mid_session_resumes_from_history(
    devstack: DevStack, tmp_path: Path
) -> None:
    log = tmp_path / "answers.jsonl"
    turns = 6
    async with single_node(devstack.settings, tmp_path, "polar-temporal-restart", delay_s=0.2) as (
        backend,
        node,
        polar,
    ):
        try:
            spec = fault_task("temporal-restart", turns=turns, log=log, pause_s=1.0, heartbeat_s=60)
            run = await polar.submit(spec)
            await wait_for(lambda: len(answered(log)) >= 2, 120, "two answered calls")
            worker_pid = node.pid("worker")
            devstack.stop("temporal", quiet=True)  # SIGTERM: the dev server closes its SQLite db
            assert devstack.pid("temporal") is None
            await asyncio.sleep(2)
            devstack.start(devstack.temporal(), log=lambda _: None)  # same db file and port
            result = await polar.wait(run, timeout_s=240)
            assert node.pid("worker") == worker_pid  # the same worker process reconnected
        finally:
            if devstack.pid("temporal") is None:
                devstack.start(devstack.temporal(), log=lambda _: None)

    session = result.sessions[0]
    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.reward == 1.0
    records = polar.storage.list_completions(session.session_id)
    assert len(records) == turns == len(answered(log))
    _assert_nothing_lost(polar, session, log, turns)

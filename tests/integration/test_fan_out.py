"""Large tasks fan out through SessionBatch workflows (workflows/rollout_task.py).

Above BATCH_SIZE sessions a RolloutTask starts SessionBatch children of at most
BATCH_SIZE sessions, which start the Session children side by side. On the
real dev server: every session of a 25-session task completes, in index order,
each under a batch; the task's histories replay against today's code (and are
stored as tests/histories/*-batches.json with POLAR_RECORD_HISTORIES=1); a
cancelled batched task cancels every session; early stop keeps direct starts.
"""

from __future__ import annotations

import os
import uuid

import pytest
from temporalio.client import WorkflowFailureError

from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.tasks.spec import TaskSpec
from tests.support.paths import HISTORIES
from tests.support.polling import wait_for
from workflows import replay as rp
from workflows.rollout_task import BATCH_SIZE, batches

HISTORIES = HISTORIES


def task(n: int, command: str = "true", **extra: object) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": f"fan-{uuid.uuid4().hex[:6]}",
            "num_sessions": n,
            "harness": {"command": command},
            **extra,
        }
    )


@pytest.mark.parametrize("count", [1, 20, 21, 45, 200, 1000, 1024])
def test_batches_cover_every_session_once_in_order(count: int) -> None:
    parts = batches(count)
    assert [i for part in parts for i in part] == list(range(count))
    assert max(len(p) for p in parts) <= BATCH_SIZE
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1  # near-equal
    assert len(parts) == -(-count // BATCH_SIZE)


def sessions_of(task_id: str, running: bool = False) -> str:
    """The visibility query of a task's Session workflows."""
    query = f"PolarTaskId = '{task_id}' AND WorkflowType = 'Session'"
    return query + (" AND ExecutionStatus = 'Running'" if running else "")


async def _workflows(polar: PolarClient, query: str) -> list[tuple[str, str, str | None]]:
    return [
        (ex.id, ex.workflow_type, ex.parent_id) async for ex in polar.client.list_workflows(query)
    ]


async def test_a_large_task_runs_through_batches_and_replays(polar: PolarClient) -> None:
    spec = task(BATCH_SIZE + 5)
    run = await polar.submit(spec)
    result = await polar.wait(run, timeout_s=300)
    assert [s.index for s in result.sessions] == list(range(spec.num_sessions))
    assert {s.status for s in result.sessions} == {SessionStatus.COMPLETED}
    status = await polar.status(run)
    assert (status.total, status.done) == (spec.num_sessions, spec.num_sessions)
    assert sorted(s.session_id for s in status.sessions) == sorted(
        s.session_id for s in result.sessions
    )
    assert {s.stage for s in status.sessions} == {"done"}

    sessions = await _workflows(polar, sessions_of(spec.task_id))
    batch_ids = {parent for _, kind, parent in sessions}
    assert {kind for _, kind, _ in sessions} == {"Session"} and len(sessions) == spec.num_sessions
    assert len(batch_ids) == 2 and run.workflow_id not in batch_ids  # started by the batches
    for batch_id in batch_ids:
        desc = await polar.client.get_workflow_handle(batch_id).describe()
        assert desc.workflow_type == "SessionBatch"
        assert desc.raw_description.workflow_execution_info.parent_execution.workflow_id == (
            run.workflow_id
        )

    # the task, a batch and a session replay against today's code
    ids = {
        "rollouttask-batches": run.workflow_id,
        "sessionbatch": sorted(batch_ids)[0],
        "session-batched": result.sessions[0].session_id,
    }
    for name, workflow_id in ids.items():
        history = await rp.fetch_history(polar.client, workflow_id)
        report = await rp.replay(history)
        assert report.ok, f"{name}: {report.explanation}"
        if os.environ.get("POLAR_RECORD_HISTORIES"):
            rp.save_history(history, HISTORIES / f"{name}.json")


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "direct"])
async def test_cancelling_a_batched_task_cancels_every_session(
    polar: PolarClient, batched: bool
) -> None:
    # direct starts (early stop) need no more than a few sessions to show the cancel
    count = BATCH_SIZE + 1 if batched else 3
    extra = {} if batched else {"min_usable_sessions": count}
    # the harness outlives any wait here, even on a loaded machine: it ends only by the cancel
    spec = task(count, "sleep 1800", timeouts={"harness_s": 3600}, **extra)
    run = await polar.submit(spec)
    query = sessions_of(spec.task_id, running=True)

    async def running(want: int) -> bool:
        return await _count(polar, query) == want

    await wait_for(lambda: running(spec.num_sessions), 240, "every session started", 0.5)
    await polar.cancel(run)
    with pytest.raises(WorkflowFailureError):
        await polar.wait(run, timeout_s=240)

    await wait_for(lambda: running(0), 240, "no session running after the cancel", 0.5)
    statuses = [
        (await polar.client.get_workflow_handle(wid).describe()).status.name
        for wid, _, _ in await _workflows(polar, sessions_of(spec.task_id))
    ]
    assert statuses == ["CANCELED"] * spec.num_sessions


async def _count(polar: PolarClient, query: str) -> int:
    return len(await _workflows(polar, query))


async def test_early_stop_keeps_direct_starts(polar: PolarClient) -> None:
    spec = task(BATCH_SIZE + 1, min_usable_sessions=BATCH_SIZE + 1)
    run = await polar.submit(spec)
    result = await polar.wait(run, timeout_s=300)
    assert len(result.sessions) == spec.num_sessions
    sessions = await _workflows(polar, sessions_of(spec.task_id))
    assert {parent for _, _, parent in sessions} == {run.workflow_id}

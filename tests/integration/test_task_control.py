"""Task control and the trainer loop on the real Temporal dev server.

Early stop (`min_usable_sessions`), priorities, policy-version tags and
`PolarClient.iter_groups`. Harnesses are shell commands that make one real
model call through an in-process gateway (scripted backend, real S3), so
sessions end with traces and count as usable; stragglers `sleep 60`.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.tasks.spec import TaskSpec
from proxy.app import create_app
from tests.support import scripted_backend, serve_app, text
from tests.support.paths import HISTORIES
from tests.support.polling import wait_for
from workflows import replay as rp

HISTORIES = HISTORIES

# one chat call through the gateway the harness is pointed at
CALL = (
    'curl -sf "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" '
    "-H 'content-type: application/json' "
    '-d \'{"model":"p","messages":[{"role":"user","content":"hi"}]}\' > /dev/null'
)


@pytest.fixture(scope="module")
def model_gateway(devstack: DevStack) -> Iterator[str]:
    """A gateway (in this process) in front of a scripted backend; yields its base URL."""
    with scripted_backend([text(f"ok {i}") for i in range(200)]) as backend:
        settings = devstack.settings.model_copy(update={"upstream_urls": backend.url})
        with serve_app(create_app(settings)) as url:
            yield url


@pytest.fixture(scope="module")
async def polar(devstack: DevStack, model_gateway: str) -> AsyncIterator[PolarClient]:
    """A worker on this module's own queue whose sessions reach `model_gateway` (a sealed
    harness reaches only its channel, which leads to the worker's gateway)."""
    from activities.worker import running_workers

    settings = devstack.settings.model_copy(
        update={"task_queue": f"polar-tc-{uuid.uuid4().hex[:8]}", "gateway_url": model_gateway}
    )
    async with running_workers(settings):
        yield await PolarClient.connect(settings)


def _spec(task_id: str, command: str, tmp_path: Path, **extra: Any) -> TaskSpec:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "README").write_text("task control\n")
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "source": {"type": "dir", "path": str(repo)},
            "harness": {"command": command},
            "timeouts": {"heartbeat_s": 5},
            **extra,
        }
    )


def _slow_unless(fast: str) -> str:
    """Sessions whose id matches `fast` (a case pattern) answer at once; the others sleep."""
    return f'case "$POLAR_SESSION_ID" in {fast}) ;; *) sleep 60 ;; esac; {CALL}'


@pytest.mark.slow
async def test_early_stop_cancels_stragglers_and_tears_them_down(
    polar: PolarClient, model_gateway: str, tmp_path: Path
) -> None:
    spec = _spec(
        "early-stop",
        _slow_unless("*-s0|*-s1"),
        tmp_path,
        num_sessions=4,
        min_usable_sessions=2,
        priority=2,
        policy_version=7,
    )
    started = time.monotonic()
    result = await polar.wait(await polar.submit(spec), timeout_s=90)
    assert time.monotonic() - started < 45, "the task waited for its stragglers"
    by_index = {s.index: s for s in result.sessions}
    assert [by_index[i].status for i in range(4)] == [
        SessionStatus.COMPLETED,
        SessionStatus.COMPLETED,
        SessionStatus.CANCELLED,
        SessionStatus.CANCELLED,
    ]
    assert result.stopped_early
    assert [by_index[i].error for i in (2, 3)] == ["cancelled by early stop"] * 2
    assert [s.index for s in result.usable] == [0, 1]
    runtimes = Path(polar.settings.data_dir) / "runtimes"
    for session in result.sessions:
        assert not (runtimes / session.session_id).exists(), "teardown did not run"
    # traces carry the policy version; stages ran with the task's priority
    traces = polar.load_traces(by_index[0])
    assert traces and {t.provenance.policy_version for t in traces} == {7}
    assert result.policy_version == 7
    history = await polar.client.get_workflow_handle(by_index[2].session_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    names = [a.activity_type.name for a in scheduled]
    assert names[0] == "prepare_runtime" and names[-1] == "teardown"
    assert {a.priority.priority_key for a in scheduled} == {2}
    started_event = history.events[0].workflow_execution_started_event_attributes
    assert started_event.priority.priority_key == 2


@pytest.mark.slow
async def test_early_stop_never_reached_waits_for_all(
    polar: PolarClient, model_gateway: str, tmp_path: Path
) -> None:
    """Failed sessions are not usable: with too few usable ones the task simply finishes."""
    spec = _spec(
        "early-stop-unmet",
        f'{CALL}; case "$POLAR_SESSION_ID" in *-s0) ;; *) exit 3 ;; esac',
        tmp_path,
        num_sessions=3,
        min_usable_sessions=2,
    )
    result = await polar.wait(await polar.submit(spec), timeout_s=90)
    assert not result.stopped_early
    assert sorted(s.status for s in result.sessions) == sorted(
        [SessionStatus.COMPLETED, SessionStatus.HARNESS_FAILED, SessionStatus.HARNESS_FAILED]
    )
    assert len(result.usable) == 1


def test_task_control_fields_are_validated() -> None:
    base = {"task_id": "t", "harness": {"command": "true"}}
    with pytest.raises(ValidationError, match="min_usable_sessions"):
        TaskSpec.model_validate(base | {"num_sessions": 2, "min_usable_sessions": 3})
    with pytest.raises(ValidationError, match="priority"):
        TaskSpec.model_validate(base | {"priority": 9})
    tagged = TaskSpec.model_validate(base | {"metadata": {"policy_version": 4}})
    assert tagged.policy_version == 4


@pytest.mark.slow
async def test_iter_groups_yields_groups_in_finish_order_and_drops_stale(
    polar: PolarClient, model_gateway: str, tmp_path: Path
) -> None:
    plan = [("slow", 8, 3), ("fast", 0, 3), ("stale", 0, 1), ("mid", 4, 3)]
    runs = [
        await polar.submit(
            _spec(
                f"iter-{name}",
                f"sleep {delay}; {CALL}",
                tmp_path,
                num_sessions=2,
                policy_version=version,
            )
        )
        for name, delay, version in plan
    ]
    arrived: list[tuple[str, float]] = []
    started = time.monotonic()
    async for group in polar.iter_groups(
        runs, load_traces=True, min_policy_version=lambda: 2, timeout_s=120
    ):
        assert group.result is not None
        arrived.append((group.result.task_id, time.monotonic() - started))
        assert group.policy_version == 3
        assert len(group.traces) == 2  # one call per session, per_request builder
        assert {t.provenance.policy_version for t in group.traces} == {3}
        assert {t.provenance.task_id for t in group.traces} == {group.result.task_id}
    assert [name for name, _ in arrived] == ["iter-fast", "iter-mid", "iter-slow"]
    # the fast group was handed over well before the slow one finished
    assert arrived[0][1] + 3 < arrived[-1][1]


@pytest.mark.slow
async def test_cancelling_an_early_stop_task_tears_every_session_down(
    polar: PolarClient, model_gateway: str, tmp_path: Path
) -> None:
    spec = _spec(
        "early-stop-cancel",
        f"sleep 60; {CALL}",
        tmp_path,
        num_sessions=2,
        min_usable_sessions=1,
    )
    run = await polar.submit(spec)
    status = await polar.status(run)

    async def both_running() -> bool:
        nonlocal status
        status = await polar.status(run)
        return len(status.sessions) == 2 and all(s.stage == "run" for s in status.sessions)

    await wait_for(both_running, 60, "both harnesses running", every_s=0.1)
    await polar.cancel(run)
    with pytest.raises(WorkflowFailureError):
        await polar.wait(run, timeout_s=60)
    runtimes = Path(polar.settings.data_dir) / "runtimes"
    for session in status.sessions:
        desc = await polar.client.get_workflow_handle(session.session_id).describe()
        assert desc.status == WorkflowExecutionStatus.CANCELED
        assert not (runtimes / session.session_id).exists(), "teardown did not run on cancel"


async def test_a_cancel_that_lands_while_prepare_finishes_still_ends_the_session(
    polar: PolarClient, tmp_path: Path
) -> None:
    """The heartbeat that would bring the cancel to `prepare_runtime` is throttled (a 60 s
    heartbeat timeout sends one every 48 s), so prepare completes first and hands the
    workflow its runtime. The session must still end cancelled, its runtime torn down,
    without starting the harness (which would run to its one-hour budget)."""
    spec = _spec(
        f"cancel-in-prepare-{uuid.uuid4().hex[:6]}",
        "sleep 3600",
        tmp_path,
        runtime={"prepare": [{"type": "run", "command": "sleep 6"}]},
        timeouts={"heartbeat_s": 60, "harness_s": 3600},
    )
    run = await polar.submit(spec)
    query = f"PolarTaskId = '{spec.task_id}' AND WorkflowType = 'Session'"
    ids: list[str] = []

    async def preparing() -> bool:
        ids[:] = [ex.id async for ex in polar.client.list_workflows(query)]
        if not ids:
            return False
        desc = await polar.client.get_workflow_handle(ids[0]).describe()
        return any(
            pa.activity_type.name == "prepare_runtime" and pa.HasField("last_started_time")
            for pa in desc.raw_description.pending_activities
        )

    await wait_for(preparing, 60, "prepare_runtime started", every_s=0.2)
    session = polar.client.get_workflow_handle(ids[0])
    await polar.cancel(run)
    with pytest.raises(WorkflowFailureError):
        await polar.wait(run, timeout_s=60)
    assert (await session.describe()).status == WorkflowExecutionStatus.CANCELED
    scheduled = [
        event.activity_task_scheduled_event_attributes.activity_type.name
        async for event in session.fetch_history_events()
        if event.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "prepare_runtime" in scheduled and "run_harness" not in scheduled, scheduled
    runtimes = Path(polar.settings.data_dir) / "runtimes"
    assert not (runtimes / ids[0]).exists(), "teardown did not run on cancel"
    # the history replays (and is stored as tests/histories/session-cancelled-between-stages.json
    # with POLAR_RECORD_HISTORIES=1)
    history = await rp.fetch_history(polar.client, ids[0])
    report = await rp.replay(history)
    assert report.ok, report.explanation
    if os.environ.get("POLAR_RECORD_HISTORIES"):
        rp.save_history(history, HISTORIES / "session-cancelled-between-stages.json")

"""The Temporal Web UI's own fields point to the console: a finished task's and session's
static summary and details (describe()) and current details (the `__temporal_workflow_metadata`
query the Web UI reads) carry stage, reward, outcome and the console link, only when the
submission names a console; and histories with the links replay, with or without the
metadata on their child starts (the replayer does not compare it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHistory

from polar.client.sdk import PolarClient, TaskRun
from polar.console_links import session_url, task_url
from polar.dev_console import forget_console_url, record_console_url
from polar.records import SessionStatus
from polar.tasks.spec import TaskSpec
from workflows import replay as rp

CONSOLE = "https://console.example:8410"


def spec(task_id: str, repo: Path) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "num_sessions": 1,
            "source": {"type": "dir", "path": str(repo)},
            "harness": {"command": "echo done > out.txt"},
            "evaluator": {"kind": "command", "command": "test -f out.txt"},
        }
    )


async def finished_run(
    polar: PolarClient, repo: Path, task_id: str, console: str | None
) -> TaskRun:
    run = await polar.submit(spec(task_id, repo), console_url=console)
    result = await polar.wait(run, timeout_s=120)
    assert [s.status for s in result.sessions] == [SessionStatus.COMPLETED]
    return run


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("web-ui-repo")
    (path / "README").write_text("web ui\n")
    return path


@pytest.fixture(scope="module")
async def linked(polar: PolarClient, repo: Path) -> TaskRun:
    return await finished_run(polar, repo, "web-ui-linked", CONSOLE)


async def shown(polar: PolarClient, workflow_id: str) -> tuple[str | None, str | None, str]:
    """What the Web UI shows of a workflow: static summary, static details, current details."""
    handle = polar.client.get_workflow_handle(workflow_id)
    desc = await handle.describe()
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return await desc.static_summary(), await desc.static_details(), metadata.current_details


async def session_id_of(polar: PolarClient, run: TaskRun) -> str:
    (session,) = (await polar.status(run)).sessions
    return session.session_id


async def test_a_finished_task_shows_its_stage_reward_outcomes_and_console_link(
    polar: PolarClient, linked: TaskRun
) -> None:
    summary, details, current = await shown(polar, linked.workflow_id)
    link = task_url(CONSOLE, linked.workflow_id)
    assert summary == "web-ui-linked: 1 × command"
    assert details == f"[Task in the Polar console]({link})"
    assert current == (
        "**done**: 1/1 sessions done · mean reward **1.000** · outcomes ok 1"
        f"\n\n[Task in the Polar console]({link})"
    )


async def test_a_finished_session_shows_its_stage_reward_outcome_and_console_link(
    polar: PolarClient, linked: TaskRun
) -> None:
    session_id = await session_id_of(polar, linked)
    summary, details, current = await shown(polar, session_id)
    link = session_url(CONSOLE, session_id)
    assert summary == "web-ui-linked · session 0 · command"
    assert details == f"[Session in the Polar console]({link})"
    assert current == (
        f"**done**: completed · reward **1** · outcome **ok**\n\n"
        f"[Session in the Polar console]({link})"
    )


async def test_without_a_console_there_is_no_link(polar: PolarClient, repo: Path) -> None:
    assert polar.settings.console_public_url is None
    run = await finished_run(polar, repo, "web-ui-unlinked", None)
    for workflow_id in (run.workflow_id, await session_id_of(polar, run)):
        _, details, current = await shown(polar, workflow_id)
        assert details is None
        assert current.startswith("**done**: ") and "console" not in current
        desc = await polar.client.get_workflow_handle(workflow_id).describe()
        assert await desc.memo() == {}


async def test_a_dev_stack_console_is_linked_without_the_setting(
    polar: PolarClient, repo: Path, tmp_path: Path
) -> None:
    """The console a dev stack of the client's data dir noted (polar.dev_console) is linked;
    once forgotten (its console stopped), nothing is."""
    settings = polar.settings.model_copy(update={"data_dir": tmp_path})
    client = PolarClient(polar.client, settings)
    record_console_url(tmp_path, "http://127.0.0.1:8410/")
    run = await client.submit(spec("web-ui-dev-console", repo))
    _, details, _ = await shown(polar, run.workflow_id)
    assert (
        details
        == f"[Task in the Polar console]({task_url('http://127.0.0.1:8410', run.workflow_id)})"
    )
    await polar.wait(run, timeout_s=120)
    forget_console_url(tmp_path)
    unlinked = await client.submit(spec("web-ui-dev-console-gone", repo))
    _, details, _ = await shown(polar, unlinked.workflow_id)
    assert details is None
    await polar.wait(unlinked, timeout_s=120)


def without_child_metadata(history: WorkflowHistory) -> tuple[WorkflowHistory, int]:
    """`history` as code without the links would have recorded it: its child starts with
    no memo and no summary or details; and how many child starts were changed."""
    copy = WorkflowHistory.from_json(history.workflow_id, history.to_json())
    changed = 0
    for event in copy.events:
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            event.start_child_workflow_execution_initiated_event_attributes.ClearField("memo")
            event.ClearField("user_metadata")
            changed += 1
    return copy, changed


async def test_histories_with_links_replay_with_or_without_the_child_metadata(
    polar: PolarClient, linked: TaskRun
) -> None:
    task = await rp.fetch_history(polar.client, linked.workflow_id)
    session = await rp.fetch_history(polar.client, await session_id_of(polar, linked))
    for history in (task, session):
        report = await rp.replay(history)
        assert report.ok, report.explanation
    stripped, changed = without_child_metadata(task)
    assert changed == 1
    report = await rp.replay(stripped)
    assert report.ok, report.explanation

"""A TaskSpec that is wrong fails fast, with a message that says what is wrong."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from polar.models import TaskSpec
from polar.sdk import PolarClient


async def test_invalid_task_spec_fails_workflow_without_retry(polar: PolarClient) -> None:
    bad = {"task_id": "bad task!", "num_sessions": 0, "harness": {"kind": "nope"}}
    handle = await polar.client.start_workflow(
        "RolloutTask", bad, id=f"bad-{uuid.uuid4().hex[:6]}", task_queue=polar.settings.task_queue
    )
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidTaskSpec"
    assert cause.non_retryable
    for field in ("task_id", "num_sessions", "harness.kind"):
        assert field in cause.message
    history = await handle.fetch_history()
    # failed on its first workflow task: no activity, no child, no retry
    assert not [e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")]


def test_unknown_builder_and_missing_evaluator_command_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown builder 'magic'"):
        TaskSpec.model_validate(
            {"task_id": "t", "harness": {"command": "true"}, "builder": {"name": "magic"}}
        )
    with pytest.raises(ValueError, match="needs a non-empty 'command'"):
        TaskSpec.model_validate(
            {"task_id": "t", "harness": {"command": "true"}, "evaluator": {"kind": "command"}}
        )


async def test_submit_validates_before_starting(polar: PolarClient) -> None:
    with pytest.raises(ValueError, match="unknown_field"):
        await polar.submit({"task_id": "t", "harness": {"command": "true"}, "unknown_field": 1})


async def test_temporal_cli_start_with_input_file_works_like_submit(
    polar: PolarClient, tmp_path: Path
) -> None:
    """`temporal workflow start --type RolloutTask --input-file task.json` works as submit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    task_file = tmp_path / "task.json"
    task_file.write_text(
        json.dumps(
            {
                "task_id": "cli-start",
                "num_sessions": 2,
                "source": {"type": "dir", "path": str(repo)},
                "harness": {"kind": "command", "command": "echo hi > out.txt"},
                "evaluator": {"kind": "command", "command": "test -f out.txt"},
            }
        )
    )
    temporal = Path(sys.executable).parent / "temporal"
    workflow_id = f"cli-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run(
        [str(temporal), "workflow", "start", "--type", "RolloutTask",
         "--task-queue", polar.settings.task_queue, "--input-file", str(task_file),
         "--workflow-id", workflow_id, "--address", polar.settings.temporal_address],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = await polar.wait(workflow_id, timeout_s=120)
    assert result.task_id == "cli-start"
    assert [s.reward for s in result.sessions] == [1.0, 1.0]
    # the sessions are filterable by the search attributes the Web UI shows
    query = "PolarTaskId = 'cli-start' AND PolarStatus = 'completed' AND PolarReward = 1.0"
    expected = sorted(s.session_id for s in result.sessions)
    for _ in range(50):  # visibility is eventually consistent
        found = sorted([w.id async for w in polar.client.list_workflows(query)])
        if found == expected:
            break
        await asyncio.sleep(0.2)
    assert found == expected

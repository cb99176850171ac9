"""A TaskSpec that is wrong fails fast, with a message that says what is wrong."""

from __future__ import annotations

import uuid

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

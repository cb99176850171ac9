"""How a session issues its stages (workflows/stage_calls.py): waits from the task's
heartbeat, priority from the task, and each stage on its pool's queue, on the runtime's host
when it follows the runtime."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from polar.tasks.spec import TaskSpec
from workflows import stages
from workflows.queues import HostQueues
from workflows.stage_calls import StageCalls


def _task(**extra: object) -> TaskSpec:
    return TaskSpec.model_validate({"task_id": "t", "harness": {"command": "true"}, **extra})


def test_waits_grow_with_the_heartbeat_from_their_floors() -> None:
    quick = StageCalls.for_task(_task(timeouts={"heartbeat_s": 1}), "polar")
    assert (quick.host_wait, quick.probe_wait) == (timedelta(seconds=60), timedelta(seconds=10))
    slow = StageCalls.for_task(_task(timeouts={"heartbeat_s": 40}), "polar")
    assert slow.heartbeat == timedelta(seconds=40)
    assert (slow.host_wait, slow.probe_wait) == (timedelta(seconds=160), timedelta(seconds=80))
    # a task that would rather give up on a silent host sooner says so
    eager = StageCalls.for_task(_task(timeouts={"heartbeat_s": 40, "host_wait_s": 15}), "polar")
    assert eager.host_wait == timedelta(seconds=15)


def test_priority_only_when_the_task_sets_one() -> None:
    assert StageCalls.for_task(_task(), "polar").priority.priority_key is None
    assert StageCalls.for_task(_task(priority=2), "polar").priority.priority_key == 2


@pytest.mark.parametrize(
    ("stage", "hosted", "shared"),
    [
        (stages.PREPARE_RUNTIME, "polar-init", "polar-init"),  # it picks the host
        (stages.RUN_HARNESS, "polar-host-h1-run", "polar-run"),
        (stages.BUILD_TRAJECTORY, "polar-postrun", "polar-postrun"),  # S3 only
        (stages.EVALUATE, "polar-host-h1-postrun", "polar-postrun"),
        (stages.TEARDOWN, "polar-host-h1-init", "polar-init"),
    ],
)
def test_a_stage_follows_the_runtime_to_its_host_only_when_the_table_says(
    stage: stages.StageActivity[Any, Any], hosted: str, shared: str
) -> None:
    calls = StageCalls.for_task(_task(), "polar")
    host = HostQueues.for_host("polar", "h1")
    assert calls.queue(stage, host) == hosted
    assert calls.queue(stage, None) == shared

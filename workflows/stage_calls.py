"""How one session issues its stage activities: the stage table's rules with its own timeouts.

`StageCalls` holds what every stage call of a session shares (its task's timeouts, its
heartbeat, how long a host may take to start a stage, how long a probe may wait, its
priority, its queues) and turns a stage table entry (workflows/stages.py) into one
activity call, typed by that entry: `await calls.execute(stages.BUILD_TRAJECTORY, request)`
is a `BuildResult`. The Session workflow (workflows/session.py) and its placement
(workflows/placement.py) issue every activity through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import Priority
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from polar.tasks.spec import TaskSpec, Timeouts
    from workflows.queues import HostQueues, Queues
    from workflows.stages import StageActivity

In = TypeVar("In", bound=BaseModel | None)
Out = TypeVar("Out", bound=BaseModel | None)


@dataclass(frozen=True)
class StageCalls:
    """The activity options one session's stages share (see the module docstring)."""

    timeouts: Timeouts
    queues: Queues
    heartbeat: timedelta
    host_wait: timedelta
    """How long a stage may wait for the runtime's host to start it (then the host is probed)."""
    probe_wait: timedelta
    """How long a liveness probe may wait for the host to answer."""
    priority: Priority

    @classmethod
    def for_task(cls, task: TaskSpec, workflow_queue: str) -> StageCalls:
        t = task.timeouts
        return cls(
            timeouts=t,
            queues=Queues.for_workflow_queue(workflow_queue),
            heartbeat=timedelta(seconds=t.heartbeat_s),
            host_wait=timedelta(seconds=t.host_wait()),
            probe_wait=timedelta(seconds=max(10.0, 2 * t.heartbeat_s)),
            # None keeps the commands earlier code issued
            priority=Priority(priority_key=task.priority) if task.priority else Priority.default,
        )

    def queue(self, stage: StageActivity[Any, Any], host: HostQueues | None) -> str:
        """Where `stage` goes: its pool's queue on the runtime's host when it follows the
        runtime and the runtime has a host queue, else its pool's shared queue."""
        if stage.on_host and host is not None:
            return host.of(stage.pool)
        assert stage.pool is not None, f"{stage.activity} has no shared queue"
        return self.queues.of(stage.pool)

    async def execute(
        self, stage: StageActivity[In, Out], arg: In, host: HostQueues | None = None
    ) -> Out:
        """Run `stage` to its end: on the runtime's host (`host`) when it follows the runtime,
        with a schedule-to-start timeout there (the host may be gone)."""
        return await self.start(stage, arg, host)

    def start(
        self, stage: StageActivity[In, Out], arg: In, host: HostQueues | None = None
    ) -> workflow.ActivityHandle[Out]:
        """Start `stage` as `execute` runs it; on cancel the workflow waits until the activity
        has stopped what it started (its processes), then tears down."""
        hosted = stage.on_host and host is not None
        return self.start_on(
            stage,
            arg,
            self.queue(stage, host),
            schedule_to_start=self.host_wait if hosted else None,
            wait_cancellation=True,
        )

    def start_on(
        self,
        stage: StageActivity[In, Out],
        arg: In,
        queue: str,
        *,
        schedule_to_start: timedelta | None = None,
        wait_cancellation: bool = False,
    ) -> workflow.ActivityHandle[Out]:
        """Start `stage` on `queue` with the stage table's timeout, heartbeat and retry rule
        (an entry without input gets no argument)."""
        return workflow.start_activity(
            stage.activity,
            args=[] if stage.input is None else [arg],
            result_type=stage.output,
            task_queue=queue,
            schedule_to_start_timeout=schedule_to_start,
            start_to_close_timeout=stage.start_to_close(self.timeouts),
            heartbeat_timeout=self.heartbeat if stage.heartbeat else None,
            retry_policy=stage.retry_policy(self.timeouts),
            cancellation_type=(
                ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                if wait_cancellation
                else ActivityCancellationType.TRY_CANCEL
            ),
            priority=self.priority,
        )

"""The trainer SDK: submit tasks, follow them, fetch their traces from S3.

    async with await PolarClient.connect() as polar:
        run = await polar.submit(TaskSpec(...))
        result = await polar.wait(run)
        for session in result.sessions:
            traces = polar.load_traces(session)

Results carry S3 keys and small summaries; traces are read from S3 directly,
never through Temporal history.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError

from polar.models import SessionProgress, SessionResult, TaskResult, TaskSpec, Trace
from polar.settings import Settings, get_settings
from polar.storage import Storage
from polar.temporal_client import connect


@dataclass(frozen=True)
class TaskRun:
    """One submission of a task: its RolloutTask workflow."""

    task_id: str
    workflow_id: str


@dataclass
class TaskStatus:
    workflow_id: str
    status: str
    total: int
    done: int
    sessions: list[SessionProgress]


class PolarClient:
    """Submit rollout tasks and collect their results."""

    def __init__(self, client: Client, settings: Settings, storage: Storage | None = None) -> None:
        self.client = client
        self.settings = settings
        self.storage = storage or Storage(settings)

    @classmethod
    async def connect(cls, settings: Settings | None = None) -> PolarClient:
        settings = settings or get_settings()
        return cls(await connect(settings), settings)

    async def __aenter__(self) -> PolarClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    # ------------------------------------------------------------------ submit
    async def submit(
        self, spec: TaskSpec | dict[str, Any], workflow_id: str | None = None
    ) -> TaskRun:
        """Validate `spec` here (raising pydantic's ValidationError) and start its workflow."""
        task = spec if isinstance(spec, TaskSpec) else TaskSpec.model_validate(spec)
        workflow_id = workflow_id or f"task-{task.task_id}-{uuid.uuid4().hex[:8]}"
        await self.client.start_workflow(
            "RolloutTask",
            task.model_dump(mode="json"),
            id=workflow_id,
            task_queue=self.settings.task_queue,
            static_summary=f"{task.task_id}: {task.num_sessions} × {task.harness.kind}",
        )
        return TaskRun(task.task_id, workflow_id)

    def handle(self, run: TaskRun | str) -> WorkflowHandle[Any, TaskResult]:
        workflow_id = run.workflow_id if isinstance(run, TaskRun) else run
        return self.client.get_workflow_handle(workflow_id, result_type=TaskResult)

    # ------------------------------------------------------------------ follow
    async def status(self, run: TaskRun | str) -> TaskStatus:
        """The task's workflow status and each session's stage, read live."""
        handle = self.handle(run)
        desc = await handle.describe()
        progress: dict[str, Any] = {"total": 0, "done": 0}
        sessions: list[SessionProgress] = []
        with contextlib.suppress(RPCError):  # closed workflows without a worker can't answer
            progress = await handle.query("progress")
        async for execution in self.client.list_workflows(
            f"ParentWorkflowId = '{handle.id}'", limit=10_000
        ):
            stage = (execution.search_attributes or {}).get("PolarStage", ["pending"])[0]
            state = (execution.search_attributes or {}).get("PolarStatus", [None])[0]
            sessions.append(SessionProgress(session_id=execution.id, stage=stage, status=state))
        status = desc.status.name.lower() if desc.status else "unknown"
        return TaskStatus(
            workflow_id=handle.id,
            status=status,
            total=int(progress.get("total", 0)),
            done=int(progress.get("done", 0)),
            sessions=sorted(sessions, key=lambda s: s.session_id),
        )

    async def wait(self, run: TaskRun | str, timeout_s: float | None = None) -> TaskResult:
        """Block until the task finishes; raises the workflow's failure if it failed."""
        result = self.handle(run).result()
        return await (asyncio.wait_for(result, timeout_s) if timeout_s else result)

    async def follow(self, run: TaskRun | str, every_s: float = 1.0) -> AsyncIterator[TaskStatus]:
        """Yield the task's status every `every_s` seconds until it closes."""
        while True:
            status = await self.status(run)
            yield status
            if status.status != WorkflowExecutionStatus.RUNNING.name.lower():
                return
            await asyncio.sleep(every_s)

    async def cancel(self, run: TaskRun | str) -> None:
        await self.handle(run).cancel()

    # ------------------------------------------------------------------ traces
    def load_traces(self, session: SessionResult) -> list[Trace]:
        """The traces of one session, read from S3."""
        if not session.traces_key:
            return []
        return self.storage.load_traces(session.traces_key)

    def traces_url(self, session: SessionResult) -> str | None:
        return self.storage.url(session.traces_key) if session.traces_key else None

    def web_ui_url(self, run: TaskRun | str) -> str:
        workflow_id = run.workflow_id if isinstance(run, TaskRun) else run
        host = self.settings.temporal_address.rsplit(":", 1)[0]
        return (
            f"http://{host}:{self.settings.temporal_ui_port}/namespaces/"
            f"{self.settings.temporal_namespace}/workflows/{workflow_id}"
        )

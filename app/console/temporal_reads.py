"""What the console reads from Temporal: visibility lists, workflow results, live progress.

Only reads: list (visibility queries on Polar's search attributes), describe, history
events (the start event's input, the close event's result) and the `progress` query.
A closed workflow's start and close never change, so they are cached.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHistoryEventFilterType,
)
from temporalio.service import RPCError

from app.console.filters import SAFE_TEXT, TaskFilters
from app.console.pass_at_k import top_reward
from app.console.views import TaskRow, add_results, wall_seconds
from polar import search_attributes as sa
from polar.contracts import SessionResult, TaskResult

QUERY_TIMEOUT_S = 2.0
CACHE_SIZE = 4096
MAX_SESSIONS = 10_000


class Closed:
    """A bounded cache of what closed workflows hold (their start input, their outcome)."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._items: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
        self._size = size

    def get(self, key: tuple[str, str, str]) -> Any:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        return None

    def put(self, key: tuple[str, str, str], value: Any) -> None:
        self._items[key] = value
        while len(self._items) > self._size:
            self._items.popitem(last=False)


def status_name(status: WorkflowExecutionStatus | None) -> str:
    return status.name.lower() if status is not None else "unknown"


def spec_version(spec: dict[str, Any]) -> int | None:
    """The policy version a trainer bridge tagged the task with (TaskSpec.policy_version)."""
    version = spec.get("policy_version")
    return version if isinstance(version, int) and not isinstance(version, bool) else None


class TemporalReads:
    """Reads of Polar's workflows, for the console's pages."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.closed = Closed()

    # ------------------------------------------------------------------ events
    async def start_input(self, execution: WorkflowExecution) -> dict[str, Any]:
        """The workflow's input (its first argument), cached: it never changes."""
        key = (execution.id, execution.run_id or "", "input")
        cached = self.closed.get(key)
        if cached is not None:
            return cached
        handle = self.client.get_workflow_handle(execution.id, run_id=execution.run_id)
        value: dict[str, Any] = {}
        async for event in handle.fetch_history_events(page_size=1):
            attrs = event.workflow_execution_started_event_attributes
            if attrs.input.payloads:
                decoded = await self.client.data_converter.decode(attrs.input.payloads[:1])
                value = decoded[0] if isinstance(decoded[0], dict) else {}
            break
        self.closed.put(key, value)
        return value

    async def close_event(self, execution: WorkflowExecution) -> HistoryEvent | None:
        """The close event of a closed workflow (None while it runs)."""
        if execution.status in (None, WorkflowExecutionStatus.RUNNING):
            return None
        handle = self.client.get_workflow_handle(execution.id, run_id=execution.run_id)
        async for event in handle.fetch_history_events(
            event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
        ):
            return event
        return None

    async def result_of(self, execution: WorkflowExecution, kind: type[Any]) -> tuple[Any, str]:
        """A closed workflow's result as `kind`, or None and why it has none; cached."""
        key = (execution.id, execution.run_id or "", kind.__name__)
        cached = self.closed.get(key)
        if cached is not None:
            return cached
        event = await self.close_event(execution)
        if event is None:
            return None, ""
        outcome: tuple[Any, str] = (None, status_name(execution.status))
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            payloads = event.workflow_execution_completed_event_attributes.result.payloads
            (value,) = await self.client.data_converter.decode(payloads[:1], [kind])
            outcome = (value, "")
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            outcome = (None, event.workflow_execution_failed_event_attributes.failure.message)
        self.closed.put(key, outcome)
        return outcome

    async def progress(self, execution: WorkflowExecution) -> Any:
        """The running workflow's `progress` query answer; None when none came in time."""
        handle = self.client.get_workflow_handle(execution.id, run_id=execution.run_id)
        with contextlib.suppress(RPCError, TimeoutError):
            return await asyncio.wait_for(
                handle.query("progress", rpc_timeout=timedelta(seconds=QUERY_TIMEOUT_S)),
                QUERY_TIMEOUT_S + 0.5,
            )
        return None

    async def describe(self, workflow_id: str) -> WorkflowExecution | None:
        """The workflow's latest run, or None if there is none."""
        try:
            return await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError:
            return None

    async def executions(self, query: str, limit: int) -> list[WorkflowExecution]:
        """Workflows matching a visibility query, newest first."""
        found = [e async for e in self.client.list_workflows(query, limit=limit)]
        oldest = datetime.min.replace(tzinfo=UTC)
        return sorted(found, key=lambda e: e.start_time or oldest, reverse=True)

    # ------------------------------------------------------------------ tasks
    async def task_row(self, execution: WorkflowExecution) -> TaskRow:
        """The tasks page's row of one RolloutTask: from its result, or its live progress."""
        attrs = execution.typed_search_attributes
        spec = await self.start_input(execution)
        runtime = spec.get("runtime") if isinstance(spec.get("runtime"), dict) else {}
        row = TaskRow(
            workflow_id=execution.id,
            task_id=attrs.get(sa.TASK_ID) or str(spec.get("task_id", "")),
            harness=attrs.get(sa.HARNESS) or "",
            runtime=str(runtime.get("kind")) if runtime and runtime.get("kind") else None,
            status=status_name(execution.status),
            started=execution.start_time,
            closed=execution.close_time,
            wall_s=wall_seconds(execution.start_time, execution.close_time, datetime.now(UTC)),
            total=int(spec["num_sessions"]) if isinstance(spec.get("num_sessions"), int) else None,
            policy_version=spec_version(spec),
        )
        if execution.status == WorkflowExecutionStatus.RUNNING:
            progress = await self.progress(execution)
            if isinstance(progress, dict):
                sessions = [SessionResult.model_validate(s) for s in progress.get("sessions", [])]
                row.total, row.done = int(progress.get("total", 0)), int(progress.get("done", 0))
                add_results(row, sessions, top_reward(spec))
            return row
        result, why = await self.result_of(execution, TaskResult)
        if isinstance(result, TaskResult):
            row.total = row.done = len(result.sessions)
            add_results(row, list(result.sessions), top_reward(spec))
        else:
            row.error = why or None
        return row

    async def tasks(self, filters: TaskFilters) -> list[TaskRow]:
        """The tasks page: RolloutTasks matching `filters`, newest first."""
        executions = await self.executions(filters.visibility_query(), filters.limit)
        rows = await asyncio.gather(*(self.task_row(e) for e in executions))
        return [
            r
            for r in rows
            if filters.matches_runtime(r.runtime) and filters.matches_outcomes(r.outcome_counts)
        ]

    async def find_task(self, ref: str) -> list[WorkflowExecution]:
        """The RolloutTask runs `ref` names: a workflow id, or a task id (newest first)."""
        query = (
            f"WorkflowType = 'RolloutTask' AND "
            f"(WorkflowId = '{ref}' OR {sa.TASK_ID.name} = '{ref}')"
        )
        return await self.executions(query, 50)

    async def session_executions(self, workflow_id: str) -> list[WorkflowExecution]:
        """The Session workflows of a task (its own children or its SessionBatches')."""
        if not SAFE_TEXT.match(workflow_id):  # an id made by hand, never put in a query
            return []
        query = f"RootWorkflowId = '{workflow_id}' AND WorkflowType = 'Session'"
        return [e async for e in self.client.list_workflows(query, limit=MAX_SESSIONS)]

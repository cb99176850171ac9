"""The session page's data: its workflow (result, progress, stage timeline from history)
and its S3 objects (calls, traces, grade, logs, artifacts)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import WorkflowExecution, WorkflowExecutionStatus

from app.console.calls import CallEntry
from app.console.grade import GradeFacts, grade_facts
from app.console.session_objects import Artifacts, SessionObjects, TraceSummary
from app.console.task_page import visible_session
from app.console.temporal_reads import TemporalReads, status_name
from app.console.views import SessionRow, session_row
from polar.contracts import SessionProgress, SessionResult
from polar.storage import session_prefix
from workflows.stages import STAGE_ACTIVITIES

E = EventType


@dataclass
class StageStep:
    """One activity of the session's history: its stage, queue, attempts, worker, times."""

    activity: str
    stage: str
    queue: str
    scheduled: datetime | None
    activity_id: str = ""
    attempts: int = 0
    worker: str = ""
    ended: datetime | None = None
    state: str = "scheduled"
    failure: str = ""

    @property
    def seconds(self) -> float | None:
        if self.scheduled is None or self.ended is None:
            return None
        return max(0.0, (self.ended - self.scheduled).total_seconds())


def _when(event: HistoryEvent) -> datetime | None:
    return event.event_time.ToDatetime().astimezone() if event.HasField("event_time") else None


def stage_steps(events: list[HistoryEvent]) -> list[StageStep]:
    """The session's activities in the order they were scheduled, from its history."""
    steps: dict[int, StageStep] = {}
    for event in events:
        kind = event.event_type
        if kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            name = attrs.activity_type.name
            entry = STAGE_ACTIVITIES.get(name)
            stage = entry.stage.value if entry is not None and entry.stage else ""
            steps[event.event_id] = StageStep(
                name, stage, attrs.task_queue.name, _when(event), attrs.activity_id
            )
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            if (step := steps.get(started.scheduled_event_id)) is not None:
                step.attempts, step.worker = started.attempt, started.identity
                step.state = "running"
        else:
            _close_step(steps, event)
    return list(steps.values())


PENDING_STATES = {
    PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED: "scheduled",
    PendingActivityState.PENDING_ACTIVITY_STATE_STARTED: "running",
    PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED: "cancelling",
}


def with_pending(steps: list[StageStep], pending: list[PendingActivityInfo]) -> None:
    """The open activities' attempts, workers and last failures (history records an
    activity's start only once it ends)."""
    by_id = {step.activity_id: step for step in steps if step.ended is None}
    for info in pending:
        step = by_id.get(info.activity_id)
        if step is None:
            continue
        step.state = PENDING_STATES.get(info.state, "pending")
        step.attempts = info.attempt
        step.worker = info.last_worker_identity or step.worker
        if info.HasField("last_failure"):
            step.failure = f"attempt {info.attempt - 1}: {info.last_failure.message}"


def _close_step(steps: dict[int, StageStep], event: HistoryEvent) -> None:
    kind = event.event_type
    closes: dict[Any, tuple[str, Any]] = {
        E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: (
            "completed",
            event.activity_task_completed_event_attributes,
        ),
        E.EVENT_TYPE_ACTIVITY_TASK_FAILED: ("failed", event.activity_task_failed_event_attributes),
        E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: (
            "timed out",
            event.activity_task_timed_out_event_attributes,
        ),
        E.EVENT_TYPE_ACTIVITY_TASK_CANCELED: (
            "cancelled",
            event.activity_task_canceled_event_attributes,
        ),
    }
    if kind not in closes:
        return
    state, attrs = closes[kind]
    step = steps.get(attrs.scheduled_event_id)
    if step is None:
        return
    step.state, step.ended = state, _when(event)
    if state in ("failed", "timed out") and attrs.HasField("failure"):
        step.failure = attrs.failure.message


@dataclass
class SessionView:
    """Everything the session page shows."""

    execution: WorkflowExecution | None
    """None: no such workflow in Temporal (past its retention): the page shows S3 alone."""
    status: str
    row: SessionRow
    result: SessionResult | None
    progress: SessionProgress | None
    spec: dict[str, Any]
    steps: list[StageStep]
    calls: list[CallEntry] = field(default_factory=list)
    traces_key: str | None = None
    traces: list[TraceSummary] = field(default_factory=list)
    artifacts: Artifacts | None = None
    logs: dict[str, tuple[str, bool]] = field(default_factory=dict)
    reports: dict[str, str] = field(default_factory=dict)
    grades: dict[str, GradeFacts] = field(default_factory=dict)
    """what each report says, read (per-test results, components, rubric), by report key"""
    patches: dict[str, str] = field(default_factory=dict)
    session_id: str = ""


async def history(reads: TemporalReads, execution: WorkflowExecution) -> list[HistoryEvent]:
    handle = reads.client.get_workflow_handle(execution.id, run_id=execution.run_id)
    return [event async for event in handle.fetch_history_events()]


async def workflow_part(
    reads: TemporalReads, session_id: str
) -> tuple[WorkflowExecution, SessionResult | None, SessionProgress | None, list[StageStep]] | None:
    """The session's workflow: its execution, result or live progress, and stage steps."""
    execution = await reads.describe(session_id)
    if execution is None or execution.workflow_type != "Session":
        return None
    events = await history(reads, execution)
    result: SessionResult | None = None
    progress: SessionProgress | None = None
    if execution.status == WorkflowExecutionStatus.RUNNING:
        answer = await reads.progress(execution)
        if answer is not None:
            progress = SessionProgress.model_validate(answer)
    else:
        value, _ = await reads.result_of(execution, SessionResult)
        result = value if isinstance(value, SessionResult) else None
    steps = stage_steps(events)
    raw = getattr(execution, "raw_description", None)  # describe()'s, with open activities
    if raw is not None:
        with_pending(steps, list(raw.pending_activities))
    return execution, result, progress, steps


async def session_view(
    reads: TemporalReads, objects: SessionObjects, session_id: str
) -> SessionView | None:
    """The session page of `session_id`; None if there is no such Session workflow."""
    found = await workflow_part(reads, session_id)
    if found is None:
        return await stored_session_view(objects, session_id)
    execution, result, progress, steps = found
    spec = await reads.start_input(execution)
    row = session_row(result) if result is not None else visible_session(execution)
    view = SessionView(execution, status_name(execution.status), row, result, progress, spec, steps)
    view.session_id = session_id
    cached = objects.closed.get(session_id)
    if cached is not None:
        for name, value in cached.items():
            setattr(view, name, value)
        return view
    await add_objects(view, objects, session_id)
    if execution.status not in (None, WorkflowExecutionStatus.RUNNING):
        # a closed session's objects no longer change
        objects.closed.put(session_id, {name: getattr(view, name) for name in OBJECT_FIELDS})
    return view


async def stored_session_view(objects: SessionObjects, session_id: str) -> SessionView | None:
    """The page of a session Temporal no longer holds (past its retention), from S3 alone:
    its status and reward from the rewards sidecar; None if S3 holds nothing of it."""
    if not await objects.keys(session_prefix(session_id)):
        return None
    row = SessionRow(session_id=session_id, index=None, status="unknown")
    view = SessionView(None, "not in Temporal", row, None, None, {}, [], session_id=session_id)
    await add_objects(view, objects, session_id)
    if view.traces_key is not None:
        sidecar = await objects.sidecar(view.traces_key)
        if sidecar is not None:
            row.status = str(sidecar.get("status") or "unknown")
        rewards = [t.reward for t in view.traces if t.reward is not None]
        row.reward = rewards[0] if rewards else None
    row.calls = len(view.calls)
    row.trained_tokens = sum(t.trained_tokens for t in view.traces)
    return view


OBJECT_FIELDS = ("calls", "traces_key", "traces", "artifacts", "logs", "reports", "patches")
"""The fields of a SessionView read from S3."""


async def add_objects(view: SessionView, objects: SessionObjects, session_id: str) -> None:
    """The session's S3 objects into `view`: calls, traces, artifacts, logs, the grade."""
    keys = await objects.traces_keys(session_id)
    result_key = view.result.traces_key if view.result else None
    view.traces_key = result_key if result_key in keys else (keys[0] if keys else None)
    records, traces, artifacts = await asyncio.gather(
        objects.records(session_id),
        objects.trace_index(view.traces_key) if view.traces_key else _nothing(),
        objects.artifacts(session_id),
    )
    view.traces, view.artifacts = traces, artifacts
    trained = {rid for t in traces if t.trained_tokens for rid in t.record_ids}
    view.calls = await objects.calls(records, trained)
    texts = await asyncio.gather(
        *(objects.text(k) for k in [*artifacts.harness_logs, *artifacts.eval_logs]),
        *(objects.text(k) for k in artifacts.reports),
        *(objects.text(k) for k in artifacts.patches),
    )
    logs = [*artifacts.harness_logs, *artifacts.eval_logs]
    view.logs = dict(zip(logs, texts[: len(logs)], strict=True))
    rest = texts[len(logs) :]
    view.reports = {k: t for k, (t, _) in zip(artifacts.reports, rest, strict=False)}
    view.grades = {k: grade_facts(t) for k, t in view.reports.items()}
    view.patches = {
        k: t for k, (t, _) in zip(artifacts.patches, rest[len(artifacts.reports) :], strict=True)
    }


async def _nothing() -> list[TraceSummary]:
    return []

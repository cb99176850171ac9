"""The task page's data: one RolloutTask run, its sessions, their rewards and advantages."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import WorkflowExecution, WorkflowExecutionStatus

from app.console.audits import task_audit
from app.console.session_objects import SessionObjects
from app.console.temporal_reads import TemporalReads, status_name
from app.console.views import (
    HistogramBar,
    SessionRow,
    TaskRow,
    reward_histogram,
    session_row,
    with_advantages,
)
from app.task_audit import TaskAudit, audit_key
from polar import search_attributes as sa
from polar.contracts import SessionResult, TaskResult


@dataclass
class TaskView:
    """Everything the task page shows."""

    row: TaskRow
    sessions: list[SessionRow]
    histogram: list[HistogramBar]
    has_advantages: bool
    other_runs: list[TaskRow] = field(default_factory=list)
    audit: TaskAudit | None = None

    @property
    def audit_key(self) -> str | None:
        """The S3 key of the audit shown (for its raw link)."""
        return audit_key(self.audit.fingerprint) if self.audit is not None else None


def visible_session(execution: WorkflowExecution) -> SessionRow:
    """A session's row from its search attributes alone (it has no result yet)."""
    attrs = execution.typed_search_attributes
    outcome = attrs.get(sa.OUTCOME) or []
    return SessionRow(
        session_id=execution.id,
        index=None,
        status=attrs.get(sa.STATUS) or status_name(execution.status),
        stage=attrs.get(sa.STAGE),
        outcome=outcome[0] if outcome else None,
        reason=outcome[1] if len(outcome) > 1 else None,
        reward=attrs.get(sa.REWARD),
    )


def infra_rule(spec: dict[str, Any]) -> str:
    """The task's `infra_errors.group` rule (what an infra error does to its group)."""
    errors = spec.get("infra_errors")
    rule = errors.get("group") if isinstance(errors, dict) else None
    return rule if rule in ("wait", "shrink", "drop") else "shrink"


async def task_results(reads: TemporalReads, execution: WorkflowExecution) -> list[SessionResult]:
    """The task's finished sessions: its result's, or those its progress query lists."""
    if execution.status == WorkflowExecutionStatus.RUNNING:
        progress = await reads.progress(execution)
        sessions = progress.get("sessions", []) if isinstance(progress, dict) else []
        return [SessionResult.model_validate(s) for s in sessions]
    result, _ = await reads.result_of(execution, TaskResult)
    return list(result.sessions) if isinstance(result, TaskResult) else []


async def task_view(reads: TemporalReads, objects: SessionObjects, ref: str) -> TaskView | None:
    """The task page of `ref` (a workflow id, or a task id: its newest run); None if none."""
    runs = await reads.find_task(ref)
    if not runs:
        return None
    execution = next((e for e in runs if e.id == ref), runs[0])
    row = await reads.task_row(execution)
    results = await task_results(reads, execution)
    rows = [session_row(r) for r in results]
    if execution.status == WorkflowExecutionStatus.RUNNING or not results:
        known = {r.session_id for r in rows}
        rows += [
            visible_session(e)
            for e in await reads.session_executions(execution.id)
            if e.id not in known
        ]
    rows.sort(key=lambda r: (r.index is None, r.index or 0, r.session_id))
    spec = await reads.start_input(execution)
    has_advantages = with_advantages(rows, results, infra_rule(spec)) if results else False
    rewards = [r.reward for r in rows if r.reward is not None]
    others = [e for e in runs if e.id != execution.id][:10]
    other_rows = list(await asyncio.gather(*(reads.task_row(e) for e in others)))
    audit = await task_audit(objects, spec)
    return TaskView(row, rows, reward_histogram(rewards), has_advantages, other_rows, audit)

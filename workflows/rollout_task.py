"""The RolloutTask workflow: one TaskSpec, N Session children (one GRPO group)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.common import Priority, TypedSearchAttributes
from temporalio.exceptions import CancelledError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    import polar.builders  # noqa: F401  (TaskSpec validation looks builders up)
    from polar import search_attributes as sa
    from polar.models import SessionResult, SessionSpec, SessionStatus, TaskResult, TaskSpec
    from workflows.inputs import parse_input
    from workflows.session import Session


def parse_task_spec(raw: Any) -> TaskSpec:
    """Validate the workflow input, failing the workflow (not retrying) when it is invalid."""
    return parse_input(TaskSpec, raw, "InvalidTaskSpec")


def session_ids(task: TaskSpec, nonce: str) -> list[str]:
    """Session ids are unique per submission, so a task can be rolled out again and again."""
    return [f"{task.task_id}-{nonce}-s{i}" for i in range(task.num_sessions)]


@workflow.defn(name="RolloutTask")
class RolloutTask:
    """Roll out one task: start its sessions, wait for all, return their summaries."""

    def __init__(self) -> None:
        self._results: dict[str, SessionResult] = {}
        self._total = 0
        self._usable = 0
        self._stopping = False

    @workflow.query(name="progress")
    def progress(self) -> dict[str, Any]:
        return {
            "total": self._total,
            "done": len(self._results),
            "usable": self._usable,
            "stopped_early": self._stopping,
            "sessions": [r.model_dump(mode="json") for r in self._results.values()],
        }

    @workflow.run
    async def run(self, spec: dict[str, Any]) -> TaskResult:
        task = parse_task_spec(spec)
        self._total = task.num_sessions
        workflow.upsert_search_attributes(
            [sa.TASK_ID.value_set(task.task_id), sa.HARNESS.value_set(task.harness.kind)]
        )
        workflow.set_current_details(f"0/{task.num_sessions} sessions done")
        # run ids are time-ordered (their prefix repeats within a minute): use replay-safe
        # randomness instead, so two submissions of one task never share a session id
        ids = session_ids(task, workflow.uuid4().hex[:12])
        runs = [self._run_session(task, i, sid) for i, sid in enumerate(ids)]
        if task.min_usable_sessions is None:
            results = await asyncio.gather(*runs)
        else:
            results = await self._until_usable(task.min_usable_sessions, runs)
        return TaskResult(
            task_id=task.task_id,
            sessions=list(results),
            stopped_early=self._stopping,
            policy_version=task.policy_version,
        )

    async def _until_usable(self, need: int, runs: list[Any]) -> list[SessionResult]:
        """Early stop: once `need` sessions are usable, cancel the rest and collect them.

        A cancelled session tears its runtime down before it ends, so this
        returns after every straggler has released its runtime.
        """
        tasks = [asyncio.create_task(run) for run in runs]
        try:
            await workflow.wait_condition(
                lambda: self._usable >= need or all(t.done() for t in tasks)
            )
        except asyncio.CancelledError:  # the task was cancelled: cancel (and tear down) all
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        pending = [t for t in tasks if not t.done()]
        if pending:
            self._stopping = True
            workflow.set_current_details(
                f"{self._usable} usable sessions in: cancelling {len(pending)} stragglers"
            )
            for t in pending:
                t.cancel()
        return list(await asyncio.gather(*tasks))

    async def _run_session(self, task: TaskSpec, index: int, session_id: str) -> SessionResult:
        status, error = SessionStatus.ERROR, ""
        try:
            result = await workflow.execute_child_workflow(
                Session.run,
                SessionSpec(session_id=session_id, index=index, task=task),
                id=session_id,
                task_queue=workflow.info().task_queue,
                search_attributes=TypedSearchAttributes(
                    [
                        sa.TASK_ID.value_set(task.task_id),
                        sa.HARNESS.value_set(task.harness.kind),
                    ]
                ),
                static_summary=f"{task.task_id} · session {index} · {task.harness.kind}",
                # None (no priority) issues exactly the command earlier code did
                priority=(
                    Priority(priority_key=task.priority) if task.priority else Priority.default
                ),
            )
        except ChildWorkflowError as exc:
            if isinstance(exc.cause, CancelledError):
                status = SessionStatus.CANCELLED
            error = str(exc.cause or exc)
            result = None
        except asyncio.CancelledError:
            if not self._stopping:  # the task itself was cancelled
                raise
            status, error, result = SessionStatus.CANCELLED, "cancelled by early stop", None
        if result is None:
            result = SessionResult(
                session_id=session_id,
                task_id=task.task_id,
                index=index,
                status=status,
                harness=task.harness.kind,
                error=error,
            )
        elif result.status == SessionStatus.COMPLETED and result.num_traces > 0:
            self._usable += 1
        self._results[session_id] = result
        rewards = [r.reward for r in self._results.values() if r.reward is not None]
        mean = f", mean reward {sum(rewards) / len(rewards):.3f}" if rewards else ""
        workflow.set_current_details(f"{len(self._results)}/{self._total} sessions done{mean}")
        return result

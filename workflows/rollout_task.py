"""The RolloutTask workflow: one TaskSpec, N Session children (one GRPO group).

Large groups fan out: above `BATCH_SIZE` sessions (and without early stop) the
task starts `SessionBatch` workflows of at most `BATCH_SIZE` sessions each, and
they start the Session children. Every child start takes its parent's lock on
the server, so one parent starts its children one after another; batches start
theirs side by side. The task's progress then advances a batch at a time.

A spec larger than `SPEC_INLINE_LIMIT` is stored once in S3 (`store_task_spec`)
and the children get a slim copy plus its reference (polar/tasks/spec_ref.py).

Whether the task's evaluator grades in a fresh runtime (so each session prepares it while
its harness runs) is the evaluator's own declaration (activities/evaluators), which the
worker hands to this workflow before it runs any (`RolloutTask.declare_evaluators`): the
task writes the answer into each SessionSpec (`fresh_eval_runtime`), so a session's
history holds what it was started with and no workflow names an evaluator kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, ClassVar

from temporalio import workflow
from temporalio.common import Priority, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import CancelledError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from polar import search_attributes as sa
    from polar.console_links import console_memo, session_link
    from polar.contracts import SessionResult, SessionSpec, SpecRef, TaskResult
    from polar.records import SessionStatus
    from polar.session_artifacts import fit_task_result
    from polar.tasks.spec import TaskSpec
    from polar.tasks.spec_ref import SPEC_INLINE_LIMIT, slim_spec, spec_json
    from workflows.inputs import parse_input
    from workflows.queues import Queues
    from workflows.session import Session
    from workflows.stages import STORE_TASK_SPEC
    from workflows.web_ui import console_base, task_details

# above BATCH_SIZE sessions, SessionBatch workflows start them
BATCH_SIZE = 20


def parse_task_spec(raw: Any) -> TaskSpec:
    """Validate the workflow input, failing the workflow (not retrying) when it is invalid."""
    return parse_input(TaskSpec, raw, "InvalidTaskSpec")


def session_ids(task: TaskSpec, parts: list[str]) -> list[str]:
    """Session ids are unique per submission, so a task can be rolled out again and again;
    each has a random part of its own (`parts`: one hex string per session), so no session
    can name a sibling's (its runtime dir, its evaluator's) from its own id."""
    return [f"{task.task_id}-{part}-s{i}" for i, part in enumerate(parts)]


def batches(count: int, size: int = BATCH_SIZE) -> list[range]:
    """`count` session indexes in near-equal consecutive batches of at most `size`."""
    n = -(-count // size)
    bounds = [count * k // n for k in range(n + 1)]
    return [range(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]


async def run_session(
    task: TaskSpec,
    index: int,
    session_id: str,
    spec_ref: SpecRef | None,
    fresh_eval_runtime: bool,
    stopping: Any,
    console: str | None = None,
) -> SessionResult:
    """Run one Session child to its end; a failed or cancelled child becomes a result.

    `stopping()`: whether a cancellation is the task's early stop (a result) rather than
    the task itself being cancelled (re-raised). `console`: the console's base URL, handed
    to the child in its memo and linked in its static details (None: neither, as before)."""
    status, error = SessionStatus.ERROR, ""
    try:
        result = await workflow.execute_child_workflow(
            Session.run,
            # Session.run takes the raw dict (it validates it itself); same payload bytes
            SessionSpec(
                session_id=session_id,
                index=index,
                task=task,
                spec_ref=spec_ref,
                fresh_eval_runtime=fresh_eval_runtime,
            ).model_dump(mode="json"),
            id=session_id,
            task_queue=workflow.info().task_queue,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(sa.TASK_ID, task.task_id),
                    SearchAttributePair(sa.HARNESS, task.harness.kind),
                ]
            ),
            static_summary=f"{task.task_id} · session {index} · {task.harness.kind}",
            static_details=session_link(console, session_id),
            memo=console_memo(console),
            # None (no priority) issues exactly the command earlier code did
            priority=(Priority(priority_key=task.priority) if task.priority else Priority.default),
        )
    except ChildWorkflowError as exc:
        error = str(exc.cause or exc)
        if isinstance(exc.cause, CancelledError):
            status = SessionStatus.CANCELLED
            if stopping():  # the child ran its teardown and ended cancelled: say why
                error = "cancelled by early stop"
        result = None
    except asyncio.CancelledError:
        if not stopping():  # the task itself was cancelled
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
    return result


@workflow.defn(name="SessionBatch")
class SessionBatch:
    """Start a slice of one task's sessions side by side and return their results in order.

    Input: {"task": TaskSpec, "first": index of the first session, "session_ids": [...],
    "spec_ref": SpecRef | None, "fresh_eval_runtime": bool (SessionSpec's)}."""

    @workflow.run
    async def run(self, raw: dict[str, Any]) -> list[SessionResult]:
        task = parse_task_spec(raw.get("task"))
        ref = SpecRef.model_validate(raw["spec_ref"]) if raw.get("spec_ref") else None
        first = int(raw["first"])
        fresh = bool(raw.get("fresh_eval_runtime", False))
        console = console_base()
        runs = [
            run_session(task, first + k, sid, ref, fresh, lambda: False, console)
            for k, sid in enumerate(raw["session_ids"])
        ]
        return list(await asyncio.gather(*runs))


@workflow.defn(name="RolloutTask")
class RolloutTask:
    """Roll out one task: start its sessions, wait for all, return their summaries."""

    evaluators_with_fresh_runtime: ClassVar[frozenset[str]] = frozenset()
    """The evaluator kinds that grade in a fresh runtime, as the worker's evaluators declare
    (`declare_evaluators`); empty until then: every evaluator prepares its own runtime."""

    @classmethod
    def declare_evaluators(cls, fresh_runtime: Iterable[str]) -> None:
        """The worker's evaluator kinds that grade in a fresh runtime
        (activities/evaluators: `kinds_needing_fresh_runtime()`), given before it runs
        workflows. The workflows module is passed through the sandbox (activities/worker.py),
        so its workflows see it; each session gets the answer in its input."""
        cls.evaluators_with_fresh_runtime = frozenset(fresh_runtime)

    def __init__(self) -> None:
        self._results: dict[str, SessionResult] = {}
        self._total = 0
        self._usable = 0
        self._stopping = False
        self._fresh_eval_runtime = False
        self._console: str | None = None
        self._workflow_id = ""

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
        self._fresh_eval_runtime = task.evaluator.kind in self.evaluators_with_fresh_runtime
        workflow.upsert_search_attributes(
            [sa.TASK_ID.value_set(task.task_id), sa.HARNESS.value_set(task.harness.kind)]
        )
        self._console, self._workflow_id = console_base(), workflow.info().workflow_id
        self._show("running")
        # run ids are time-ordered (their prefix repeats within a minute): use replay-safe
        # randomness instead, so two submissions of one task never share a session id
        nonce = workflow.uuid4().hex[:12]
        ids = session_ids(task, [workflow.uuid4().hex[:12] for _ in range(task.num_sessions)])
        child_task, ref = task, None
        # a spec above SPEC_INLINE_LIMIT goes to S3 once; children carry a slim copy and a ref
        if len(spec_json(task)) > SPEC_INLINE_LIMIT:
            ref = await self._store_spec(task)
            child_task = slim_spec(task)
        if task.min_usable_sessions is None and task.num_sessions > BATCH_SIZE:
            results = await self._in_batches(child_task, ids, nonce, ref)
        else:
            runs = [self._run_session(child_task, i, sid, ref) for i, sid in enumerate(ids)]
            if task.min_usable_sessions is None:
                results = await asyncio.gather(*runs)
            else:
                results = await self._until_usable(task.min_usable_sessions, runs)
        self._show("done")
        sessions, omitted = fit_task_result(list(results))
        return TaskResult(
            task_id=task.task_id,
            sessions=sessions,
            stopped_early=self._stopping,
            policy_version=task.policy_version,
            artifacts_omitted=omitted,
        )

    async def _store_spec(self, task: TaskSpec) -> SpecRef:
        """Store the full spec in S3 once (shared init queue); its reference."""
        stage = STORE_TASK_SPEC
        assert stage.pool is not None
        return await workflow.execute_activity(
            stage.activity,
            task,
            result_type=SpecRef,
            task_queue=Queues.for_workflow_queue(workflow.info().task_queue).of(stage.pool),
            start_to_close_timeout=stage.start_to_close(task.timeouts),
            retry_policy=stage.retry_policy(task.timeouts),
        )

    async def _in_batches(
        self, task: TaskSpec, ids: list[str], nonce: str, ref: SpecRef | None
    ) -> list[SessionResult]:
        """Start the sessions through SessionBatch children; results in session order."""

        async def one(k: int, part: range) -> list[SessionResult]:
            # a batch that fails or is cancelled gives its sessions results, as a session does:
            # so a cancelled task waits for every batch to finish cancelling
            try:
                results = await self._batch(k, part, task, ids, nonce, ref)
            except ChildWorkflowError as exc:
                cancelled = isinstance(exc.cause, CancelledError)
                results = [
                    SessionResult(
                        session_id=ids[i],
                        task_id=task.task_id,
                        index=i,
                        status=SessionStatus.CANCELLED if cancelled else SessionStatus.ERROR,
                        harness=task.harness.kind,
                        error=str(exc.cause or exc),
                    )
                    for i in part
                ]
            for result in results:
                self._record(result)
            return results

        parts = batches(len(ids))
        done = await asyncio.gather(*(one(k, part) for k, part in enumerate(parts)))
        return [result for part in done for result in part]

    async def _batch(
        self, k: int, part: range, task: TaskSpec, ids: list[str], nonce: str, ref: SpecRef | None
    ) -> list[SessionResult]:
        """Run one SessionBatch child over the sessions `part`."""
        raw: dict[str, Any] = {
            "task": task.model_dump(mode="json"),
            "first": part.start,
            "session_ids": ids[part.start : part.stop],
            "spec_ref": ref.model_dump(mode="json") if ref else None,
            "fresh_eval_runtime": self._fresh_eval_runtime,
        }
        # the result type comes from SessionBatch.run's annotation
        return await workflow.execute_child_workflow(
            SessionBatch.run,
            raw,
            id=f"{task.task_id}-{nonce}-b{k}",
            task_queue=workflow.info().task_queue,
            static_summary=f"{task.task_id} · sessions {part.start}-{part.stop - 1}",
            memo=console_memo(self._console),
            priority=(Priority(priority_key=task.priority) if task.priority else Priority.default),
        )

    def _record(self, result: SessionResult) -> None:
        """Count one finished session in the task's progress."""
        if result.status == SessionStatus.COMPLETED and result.num_traces > 0:
            self._usable += 1
        self._results[result.session_id] = result
        self._show("running")

    def _show(self, stage: str) -> None:
        """The task's current details in the Web UI: stage, sessions done, mean reward,
        outcome counts, console link (workflows/web_ui.py)."""
        results = list(self._results.values())
        rewards = [r.reward for r in results if r.reward is not None]
        outcomes: dict[str, int] = {}
        for r in results:
            outcome = r.outcome
            if outcome is not None:
                outcomes[outcome.outcome.value] = outcomes.get(outcome.outcome.value, 0) + 1
        counts = (len(results), self._total)
        workflow.set_current_details(
            task_details(stage, counts, rewards, outcomes, self._console, self._workflow_id)
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

    async def _run_session(
        self, task: TaskSpec, index: int, session_id: str, ref: SpecRef | None = None
    ) -> SessionResult:
        result = await run_session(
            task,
            index,
            session_id,
            ref,
            self._fresh_eval_runtime,
            lambda: self._stopping,
            self._console,
        )
        self._record(result)
        return result

"""The Session workflow: one harness run, from runtime to scored traces.

prepare_runtime (init queue) → run_harness (run queue) → build_trajectory →
evaluate → score_traces (postrun queue) → teardown (init queue, always).
Every evaluator grades in a fresh runtime (the task's source plus the
session's changes), prepared by `prepare_eval_runtime` (init queue, with the
instance's install) while the harness runs, off the critical path; it is torn
down with the session's runtime, whatever happens.
Activities are referenced by name only; all I/O lives in `activities/`.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    TimeoutError,
    TimeoutType,
    is_cancelled_exception,
)
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    import polar.builders  # noqa: F401  (TaskSpec validation looks builders up)
    from polar import search_attributes as sa
    from polar.models import (
        BuildRequest,
        BuildResult,
        EvaluateRequest,
        EvaluateResult,
        HarnessRequest,
        HarnessResult,
        PrepareRequest,
        RewardRequest,
        RuntimeHandle,
        SessionProgress,
        SessionResult,
        SessionSpec,
        SessionStatus,
        Stage,
    )
    from workflows.inputs import parse_input
    from workflows.queues import Queues

T = TypeVar("T")

# the evaluator's fresh runtime is prepared while the harness runs, behind one patch id per
# evaluator kind (histories recorded before each replay without it)
EVAL_PREWARM_PATCH = "eval-runtime-prewarm"
COMMAND_EVAL_PREWARM_PATCH = "command-eval-fresh-runtime"
EVAL_PREWARM_PATCHES = {"swebench": EVAL_PREWARM_PATCH, "command": COMMAND_EVAL_PREWARM_PATCH}
EVALUATORS_WITH_FRESH_RUNTIME = frozenset(EVAL_PREWARM_PATCHES)

HARNESS_STATUS = {
    "completed": SessionStatus.COMPLETED,
    "failed": SessionStatus.HARNESS_FAILED,
    "timeout": SessionStatus.TIMEOUT,
}


def _error_text(exc: BaseException) -> str:
    """The innermost cause's message: what actually went wrong in the activity."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}"


@workflow.defn(name="Session")
class Session:
    """One session of a rollout task: a harness in a runtime, recorded and scored."""

    def __init__(self) -> None:
        self._retry = RetryPolicy()
        self._heartbeat = timedelta(seconds=30)
        self._priority = Priority.default
        self._current = Stage.PENDING
        self._status: SessionStatus | None = None
        self._detail = ""

    @workflow.query(name="progress")
    def progress(self) -> SessionProgress:
        return SessionProgress(
            session_id=workflow.info().workflow_id,
            stage=self._current,
            status=self._status,
            detail=self._detail,
        )

    def _enter(self, stage: Stage, detail: str) -> None:
        self._current = stage
        self._detail = detail
        workflow.upsert_search_attributes([sa.STAGE.value_set(stage.value)])
        workflow.set_current_details(f"**{stage.value}**: {detail}")

    def _finish(self, result: SessionResult) -> None:
        self._status = result.status
        updates = [sa.STATUS.value_set(result.status.value)]
        if result.reward is not None:
            updates.append(sa.REWARD.value_set(result.reward))
        workflow.upsert_search_attributes(updates)

    @workflow.run
    async def run(self, raw: dict[str, Any]) -> SessionResult:
        """`raw` is a SessionSpec; an invalid one (a session id that is not a safe path, say)
        fails the workflow at once, non-retryable (`InvalidSessionSpec`), before any stage."""
        spec = parse_input(SessionSpec, raw, "InvalidSessionSpec")
        task = spec.task
        t = task.timeouts
        queues = Queues.for_workflow_queue(workflow.info().task_queue)
        self._retry = RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=t.max_attempts,
            non_retryable_error_types=["InvalidSource", "InvalidBuilder"],
        )
        self._heartbeat = timedelta(seconds=t.heartbeat_s)
        if task.priority:  # None keeps the commands earlier code issued
            self._priority = Priority(priority_key=task.priority)
        result = SessionResult(
            session_id=spec.session_id,
            task_id=task.task_id,
            index=spec.index,
            status=SessionStatus.ERROR,
            harness=task.harness.kind,
        )
        started = workflow.time()
        runtime: RuntimeHandle | None = None
        prewarm: workflow.ActivityHandle[RuntimeHandle] | None = None

        def lap(stage: Stage) -> None:
            nonlocal started
            now = workflow.time()
            result.stage_seconds[stage.value] = round(now - started, 3)
            started = now

        try:
            self._enter(Stage.PREPARE, f"preparing {task.runtime.kind} runtime")
            runtime = await self._stage(
                "prepare_runtime",
                PrepareRequest(
                    session_id=spec.session_id,
                    task_id=task.task_id,
                    runtime=task.runtime,
                    source=task.source,
                ),
                RuntimeHandle,
                queues.init,
                t.prepare_s,
            )
            lap(Stage.PREPARE)

            patch_id = EVAL_PREWARM_PATCHES.get(task.evaluator.kind)
            if patch_id is not None and workflow.patched(patch_id):
                prewarm = self._start_prewarm(spec, queues.init, t.prepare_s)

            self._enter(Stage.RUN, f"running {task.harness.kind} harness on {runtime.host}")
            try:
                harness = await self._stage(
                    "run_harness",
                    HarnessRequest(
                        session_id=spec.session_id,
                        task_id=task.task_id,
                        runtime=runtime,
                        harness=task.harness,
                        instruction=task.instruction,
                        budget_s=t.harness_s,
                    ),
                    HarnessResult,
                    queues.run,
                    t.harness_s + 120,  # backstop: the budget is enforced inside
                )
                result.status = HARNESS_STATUS[harness.status]
                result.harness_exit_code = harness.exit_code
            except ActivityError as exc:
                if is_cancelled_exception(exc):
                    raise
                timed_out = (
                    isinstance(exc.cause, TimeoutError)
                    and exc.cause.type == TimeoutType.START_TO_CLOSE
                )
                result.status = SessionStatus.TIMEOUT if timed_out else SessionStatus.ERROR
                result.error = f"run_harness: {_error_text(exc)}"
            lap(Stage.RUN)

            # whatever the harness did, its recorded calls become traces and get scored
            self._enter(Stage.BUILD, f"building traces with {task.builder.name}")
            build = await self._stage(
                "build_trajectory",
                BuildRequest(
                    session_id=spec.session_id,
                    task_id=task.task_id,
                    harness=task.harness.kind,
                    builder=task.builder,
                    policy_version=task.policy_version,
                ),
                BuildResult,
                queues.postrun,
                t.build_s,
            )
            result.traces_key = build.traces_key
            result.num_completions = build.num_completions
            result.num_traces = build.num_traces
            result.num_response_tokens = build.num_response_tokens
            result.trace_bytes = build.trace_bytes
            result.trace_breaks = build.breaks
            lap(Stage.BUILD)

            trace_rewards: dict[str, float] = {}
            if task.evaluator.kind != "none":
                self._enter(Stage.EVALUATE, f"evaluating with {task.evaluator.kind}")
                eval_runtime = await self._prewarmed(prewarm)
                evaluation = await self._stage(
                    "evaluate",
                    EvaluateRequest(
                        session_id=spec.session_id,
                        task_id=task.task_id,
                        runtime=runtime,
                        evaluator=task.evaluator,
                        budget_s=t.evaluate_s,
                        traces_key=build.traces_key,
                        source=task.source,
                        runtime_spec=task.runtime,
                        eval_runtime=eval_runtime,
                    ),
                    EvaluateResult,
                    queues.postrun,
                    t.evaluate_s + 60,
                )
                result.reward = evaluation.reward
                result.evaluation = evaluation.detail
                trace_rewards = evaluation.trace_rewards
                lap(Stage.EVALUATE)

            build = await self._stage(
                "score_traces",
                RewardRequest(
                    traces_key=build.traces_key,
                    reward=result.reward,
                    status=result.status,
                    trace_rewards=trace_rewards,
                ),
                BuildResult,
                queues.postrun,
                t.build_s,
            )
            result.trace_bytes = build.trace_bytes
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                return await self._cancelled(
                    spec, result, runtime, queues.init, t.teardown_s, prewarm
                )
            result.status = SessionStatus.ERROR
            result.error = f"{self._current.value}: {_error_text(exc)}"
        except asyncio.CancelledError:
            return await self._cancelled(spec, result, runtime, queues.init, t.teardown_s, prewarm)
        self._finish(result)
        await self._teardown(spec, runtime, queues.init, t.teardown_s, prewarm)
        lap(Stage.TEARDOWN)
        self._enter(Stage.DONE, f"{result.status.value}, reward {result.reward}")
        return result

    async def _cancelled(
        self,
        spec: SessionSpec,
        result: SessionResult,
        runtime: RuntimeHandle | None,
        queue: str,
        timeout_s: float,
        prewarm: workflow.ActivityHandle[RuntimeHandle] | None = None,
    ) -> SessionResult:
        """Mark the session cancelled, tear its runtime down, end the workflow as cancelled."""
        result.status = SessionStatus.CANCELLED
        self._finish(result)
        await self._teardown(spec, runtime, queue, timeout_s, prewarm)
        raise asyncio.CancelledError("session cancelled")

    async def _stage(
        self, name: str, arg: object, result_type: type[T], queue: str, timeout_s: float
    ) -> T:
        """Run one stage activity with the session's heartbeat timeout and retry policy."""
        return await workflow.execute_activity(
            name,
            arg,
            result_type=result_type,
            task_queue=queue,
            start_to_close_timeout=timedelta(seconds=timeout_s),
            heartbeat_timeout=self._heartbeat,
            retry_policy=self._retry,
            # on cancel, wait until the activity has stopped its processes, then tear down
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            priority=self._priority,
        )

    def _start_prewarm(
        self, spec: SessionSpec, queue: str, timeout_s: float
    ) -> workflow.ActivityHandle[RuntimeHandle]:
        """Start preparing the evaluator's fresh runtime (`{session}-eval`); not awaited here."""
        task = spec.task
        return workflow.start_activity(
            "prepare_eval_runtime",
            PrepareRequest(
                session_id=f"{spec.session_id}-eval",
                task_id=task.task_id,
                runtime=task.evaluator.eval_runtime_spec(task.runtime),  # with its install
                source=task.source,
            ),
            result_type=RuntimeHandle,
            task_queue=queue,
            start_to_close_timeout=timedelta(seconds=timeout_s),
            heartbeat_timeout=self._heartbeat,
            retry_policy=self._retry,
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            priority=self._priority,
        )

    async def _prewarmed(
        self, prewarm: workflow.ActivityHandle[RuntimeHandle] | None
    ) -> RuntimeHandle | None:
        """The prewarmed evaluator runtime; None (the evaluator prepares it) if it failed."""
        if prewarm is None:
            return None
        try:
            return await prewarm
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            workflow.logger.warning("evaluator prewarm failed, preparing it later: %s", exc)
            return None

    async def _teardown(
        self,
        spec: SessionSpec,
        runtime: RuntimeHandle | None,
        queue: str,
        timeout_s: float,
        prewarm: workflow.ActivityHandle[RuntimeHandle] | None = None,
    ) -> None:
        """Release the runtime (and the prewarmed evaluator runtime, if one was started);
        runs on success, failure and cancellation alike."""
        self._enter(Stage.TEARDOWN, "releasing the runtime")
        handle = runtime or RuntimeHandle(
            kind=spec.task.runtime.kind, session_id=spec.session_id, workdir="", host=""
        )
        await self._release(handle, queue, timeout_s)
        if prewarm is None:
            return
        if not prewarm.done():  # still preparing: stop it, then remove what it made
            prewarm.cancel()
        try:
            eval_handle = await prewarm
        except (ActivityError, asyncio.CancelledError):
            eval_handle = RuntimeHandle(
                kind=spec.task.runtime.kind,
                session_id=f"{spec.session_id}-eval",
                workdir="",
                host="",
            )
        await self._release(eval_handle, queue, timeout_s)

    async def _release(self, handle: RuntimeHandle, queue: str, timeout_s: float) -> None:
        try:
            await workflow.execute_activity(
                "teardown",
                handle,
                task_queue=queue,
                start_to_close_timeout=timedelta(seconds=timeout_s),
                retry_policy=RetryPolicy(maximum_attempts=5),
                priority=self._priority,
            )
        except ActivityError as exc:
            workflow.logger.warning("teardown of %s failed: %s", handle.session_id, exc)

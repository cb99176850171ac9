"""The Session workflow: one harness run, from runtime to scored traces.

prepare_runtime (init queue) → run_harness (run queue) → build_trajectory →
evaluate → score_traces (postrun queue) → teardown (init queue, always). Each
stage's queue, timeout and retry rule come from the stage table
(workflows/stages.py). Teardown starts as soon as nothing needs the runtimes
(after the run without an evaluator, else after evaluate) and runs beside the
stages that only touch S3; the session ends once both are done.
Every evaluator grades in a fresh runtime (the task's source plus the
session's changes), prepared by `prepare_eval_runtime` (init queue, with the
instance's install) while the harness runs, off the critical path; it is torn
down with the session's runtime, whatever happens.

Stages follow the runtime: `prepare_runtime` runs on the shared init queue and
returns the host holding the runtime and that host's queue prefix
(workflows/queues.py); `prepare_eval_runtime`, `run_harness`, `evaluate` and
`teardown` then go to that host's `-init`/`-run`/`-postrun` queues, with a
schedule-to-start timeout. Build and score only touch S3 and stay shared. A
host-queue stage not started in time (or a run whose heartbeat stopped) makes
the workflow probe the host (`host_alive` on its probe queue): a busy host gets
the stage again; a silent one is lost, and the session is prepared again on
another host as a new placement (its run attempts numbered on, so its records
stay apart), up to `max_attempts` placements, else it ends `error` naming the
lost host. The lost host's runtimes get a release on its queue (run if it comes
back while the session lives) and its sweep (activities/host_sweep.py).
Activities are referenced by name only; all I/O lives in `activities/`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import Priority, SearchAttributeUpdate
from temporalio.exceptions import (
    ActivityError,
    TimeoutError,
    TimeoutType,
    is_cancelled_exception,
)
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from polar import search_attributes as sa
    from polar.contracts import (
        BuildRequest,
        EvaluateRequest,
        HarnessRequest,
        HarnessResult,
        PrepareRequest,
        RewardRequest,
        RuntimeHandle,
        SessionProgress,
        SessionResult,
        SessionSpec,
        Stage,
    )
    from polar.records import SessionStatus
    from polar.tasks.spec import Timeouts
    from workflows import stages
    from workflows.inputs import parse_input
    from workflows.queues import HostQueues, Queues
    from workflows.stages import StageActivity

# the evaluator kinds that grade in a fresh runtime, prepared while the harness runs
# (tests/unit/activities/test_evaluator_registry.py holds it to the evaluators' own declaration)
EVALUATORS_WITH_FRESH_RUNTIME = frozenset({"swebench", "command"})
# the long stages, whose PolarStage is worth a visibility update; the others' stage goes out
# with the next of these (and the status and reward with the stage `done`)
UPSERTED_STAGES = frozenset({Stage.PREPARE, Stage.RUN, Stage.EVALUATE})

HARNESS_STATUS = {
    "completed": SessionStatus.COMPLETED,
    "failed": SessionStatus.HARNESS_FAILED,
    "timeout": SessionStatus.TIMEOUT,
}


def _recorded_nothing(harness: HarnessResult) -> bool:
    """Whether no model call can have been recorded for the session: its first run attempt
    (no earlier one left records) had the sealed channel as its only door to the gateway,
    and the channel forwarded no request."""
    return harness.attempt == 1 and harness.relayed_calls == 0


def _error_text(exc: BaseException) -> str:
    """The innermost cause's message: what actually went wrong in the activity."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}"


@workflow.defn(name="Session")
class Session:
    """One session of a rollout task: a harness in a runtime, recorded and scored."""

    def __init__(self) -> None:
        self._timeouts = Timeouts()
        self._heartbeat = timedelta(seconds=30)
        self._priority = Priority.default
        self._current = Stage.PENDING
        self._status: SessionStatus | None = None
        self._detail = ""
        self._host_wait = timedelta(seconds=60)
        self._probe_wait = timedelta(seconds=10)
        self._run_issued = 0  # run stages issued so far: each gets attempts of its own
        self._started = 0.0
        self._pending_upserts: list[Any] = []  # status and reward, sent with the last stage

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
        if stage in UPSERTED_STAGES or stage == Stage.DONE:
            workflow.upsert_search_attributes(
                [sa.STAGE.value_set(stage.value), *self._pending_upserts]
            )
            self._pending_upserts = []
        workflow.set_current_details(f"**{stage.value}**: {detail}")

    def _finish(self, result: SessionResult) -> None:
        self._status = result.status
        updates: list[SearchAttributeUpdate[Any]] = [sa.STATUS.value_set(result.status.value)]
        if result.reward is not None:
            updates.append(sa.REWARD.value_set(result.reward))
        self._pending_upserts = updates  # sent with the stage `done`

    @workflow.run
    async def run(self, raw: dict[str, Any]) -> SessionResult:
        """`raw` is a SessionSpec; an invalid one (a session id that is not a safe path, say)
        fails the workflow at once, non-retryable (`InvalidSessionSpec`), before any stage."""
        spec = parse_input(SessionSpec, raw, "InvalidSessionSpec")
        task = spec.task
        t = task.timeouts
        queues = Queues.for_workflow_queue(workflow.info().task_queue)
        self._timeouts = t
        self._heartbeat = timedelta(seconds=t.heartbeat_s)
        self._host_wait = timedelta(seconds=max(60.0, 4 * t.heartbeat_s))
        self._probe_wait = timedelta(seconds=max(10.0, 2 * t.heartbeat_s))
        if task.priority:  # None keeps the commands earlier code issued
            self._priority = Priority(priority_key=task.priority)
        hosts: list[str] = []
        warnings: list[str] = []
        placement = 0
        while True:
            result = SessionResult(
                session_id=spec.session_id,
                task_id=task.task_id,
                index=spec.index,
                status=SessionStatus.ERROR,
                harness=task.harness.kind,
                hosts=hosts,
                warnings=warnings,
            )
            placed = _Placed()
            try:
                await self._place(spec, result, queues, placed)
                break
            except _HostLost as lost:
                placement += 1
                # the next placement's result carries these on (pydantic copied the lists)
                hosts, warnings = result.hosts, result.warnings
                warnings.append(f"host {lost.host_id} lost ({lost.detail})")
                self._give_up(spec, placed)
                if placement < t.max_attempts:
                    workflow.logger.warning(
                        "session %s: %s; preparing it again elsewhere",
                        spec.session_id,
                        warnings[-1],
                    )
                    continue
                result.status = SessionStatus.ERROR
                result.error = f"{lost.stage}: host {lost.host_id} lost ({lost.detail})"
                placed.runtime = placed.prewarm = None  # only the session is closed
                break
            except ActivityError as exc:
                if is_cancelled_exception(exc):
                    return await self._cancelled(spec, result, placed, queues)
                result.status = SessionStatus.ERROR
                result.error = f"{self._current.value}: {_error_text(exc)}"
                break
            except asyncio.CancelledError:
                return await self._cancelled(spec, result, placed, queues)
        self._finish(result)
        await self._teardown(spec, result, placed, queues)
        self._lap(result, Stage.TEARDOWN)
        self._enter(Stage.DONE, f"{result.status.value}, reward {result.reward}")
        return result

    def _lap(self, result: SessionResult, stage: Stage) -> None:
        now = workflow.time()
        result.stage_seconds[stage.value] = round(now - self._started, 3)
        self._started = now

    async def _place(
        self, spec: SessionSpec, result: SessionResult, queues: Queues, placed: _Placed
    ) -> None:
        """One placement of the session: prepare a runtime (shared init queue), then every
        stage on its host; `_HostLost` if that host stops answering."""
        task = spec.task
        t = task.timeouts
        self._started = workflow.time()
        self._enter(Stage.PREPARE, f"preparing {task.runtime.kind} runtime")
        runtime: RuntimeHandle = await self._stage(
            stages.PREPARE_RUNTIME,
            PrepareRequest(
                session_id=spec.session_id,
                task_id=task.task_id,
                runtime=task.runtime,
                source=task.source,
            ),
            queues,
        )
        placed.runtime = runtime
        if runtime.host_queue:  # stages that touch the runtime go to its host's queues
            placed.host = HostQueues.for_prefix(runtime.host_queue)
            result.hosts.append(runtime.host_id or runtime.host)
        self._lap(result, Stage.PREPARE)
        self._stop_if_cancelled()

        if task.evaluator.kind in EVALUATORS_WITH_FRESH_RUNTIME:
            placed.prewarm = self._start_prewarm(spec, queues, placed.host)

        self._enter(Stage.RUN, f"running {task.harness.kind} harness on {runtime.host}")
        recorded_nothing = False
        try:

            def harness_request(issue: int) -> HarnessRequest:
                base = self._run_issued * t.max_attempts
                self._run_issued += 1
                return HarnessRequest(
                    session_id=spec.session_id,
                    task_id=task.task_id,
                    runtime=runtime,
                    harness=task.harness,
                    instruction=task.instruction,
                    budget_s=t.harness_s,
                    spec_ref=spec.spec_ref,  # the instruction is in S3 when it is set
                    attempt_base=base,
                )

            harness = await self._on_host(stages.RUN_HARNESS, harness_request, queues, placed)
            result.status = HARNESS_STATUS[harness.status]
            result.harness_exit_code = harness.exit_code
            recorded_nothing = _recorded_nothing(harness)
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            timed_out = (
                isinstance(exc.cause, TimeoutError) and exc.cause.type == TimeoutType.START_TO_CLOSE
            )
            result.status = SessionStatus.TIMEOUT if timed_out else SessionStatus.ERROR
            result.error = f"run_harness: {_error_text(exc)}"
        self._lap(result, Stage.RUN)
        self._stop_if_cancelled()
        if task.evaluator.kind == "none":
            self._release_early(spec, placed, queues)

        no_records = recorded_nothing and task.evaluator.kind == "none"
        if no_records:
            return  # no record can exist: nothing to build or score
        # whatever the harness did, its recorded calls become traces and get scored
        self._enter(Stage.BUILD, f"building traces with {task.builder.name}")
        build = await self._stage(
            stages.BUILD_TRAJECTORY,
            BuildRequest(
                session_id=spec.session_id,
                task_id=task.task_id,
                harness=task.harness.kind,
                builder=task.builder,
                policy_version=task.policy_version,
            ),
            queues,
        )
        result.traces_key = build.traces_key
        result.num_completions = build.num_completions
        result.num_traces = build.num_traces
        result.num_response_tokens = build.num_response_tokens
        result.trace_bytes = build.trace_bytes
        result.trace_breaks = build.breaks
        result.unseen_completions = build.unseen_completions
        self._lap(result, Stage.BUILD)
        self._stop_if_cancelled()

        trace_rewards: dict[str, float] = {}
        if task.evaluator.kind != "none":
            self._enter(Stage.EVALUATE, f"evaluating with {task.evaluator.kind}")
            eval_runtime = await self._prewarmed(placed.prewarm)

            def evaluate_request(issue: int) -> EvaluateRequest:
                return EvaluateRequest(
                    session_id=spec.session_id,
                    task_id=task.task_id,
                    runtime=runtime,
                    evaluator=task.evaluator,
                    budget_s=t.evaluate_s,
                    traces_key=build.traces_key,
                    source=task.source,
                    runtime_spec=task.runtime,
                    # issued again: it may have started, so it prepares a fresh one
                    eval_runtime=eval_runtime if issue == 0 else None,
                    spec_ref=spec.spec_ref,  # the test patch is in S3 when it is set
                )

            evaluation = await self._on_host(stages.EVALUATE, evaluate_request, queues, placed)
            result.evaluation = evaluation.detail
            if result.status == SessionStatus.ERROR:  # one status, one reward: none for it
                result.warnings.append(
                    f"reward {evaluation.reward} withheld: the run stage ended in error, "
                    "so the grade is no verdict on the policy"
                )
            else:
                result.reward = evaluation.reward
                trace_rewards = evaluation.trace_rewards
            self._lap(result, Stage.EVALUATE)
            self._stop_if_cancelled()
            self._release_early(spec, placed, queues)

        if build.num_traces == 0:
            return  # nothing to score
        self._enter(Stage.SCORE, f"scoring {build.num_traces} traces")
        scored = await self._stage(
            stages.SCORE_TRACES,
            RewardRequest(
                traces_key=build.traces_key,
                reward=result.reward,
                status=result.status,
                trace_rewards=trace_rewards,
            ),
            queues,
        )
        result.trace_bytes = scored.trace_bytes
        self._lap(result, Stage.SCORE)

    @staticmethod
    def _stop_if_cancelled() -> None:
        """Raise CancelledError if the session was cancelled while the stage that just ended
        finished anyway: with WAIT_CANCELLATION_COMPLETED, an activity that completes before
        it sees the cancel hands the workflow its result and the cancel is spent."""
        if workflow.cancellation_reason() is not None:
            raise asyncio.CancelledError("session cancelled between stages")

    async def _on_host(
        self,
        stage: StageActivity,
        request: Callable[[int], object],
        queues: Queues,
        placed: _Placed,
    ) -> Any:
        """A stage on the runtime's host: not started there within the host wait (or its last
        attempt's heartbeat lost), the host is probed; alive, a stage that never started is
        issued again (the host is only busy); silent, `_HostLost`."""
        issue = 0
        while True:
            try:
                return await self._stage(stage, request(issue), queues, placed.host)
            except ActivityError as exc:
                silence = _silence(exc)
                if placed.host is None or silence is None:
                    raise
                if not await self._alive(placed.host.probe):
                    raise _HostLost(_host_of(placed), stage.activity, _error_text(exc)) from None
                if silence != TimeoutType.SCHEDULE_TO_START:
                    raise  # the host is up: the stage itself stopped answering
                issue += 1

    async def _alive(self, probe_queue: str) -> bool:
        """Whether a worker of the host answers on its probe queue within the probe wait."""
        try:
            probe = stages.HOST_ALIVE
            await workflow.execute_activity(
                probe.activity,
                task_queue=probe_queue,
                schedule_to_start_timeout=self._probe_wait,
                start_to_close_timeout=probe.start_to_close(self._timeouts),
                retry_policy=probe.retry_policy(self._timeouts),
                priority=self._priority,
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            return False
        return True

    def _give_up(self, spec: SessionSpec, placed: _Placed) -> None:
        """Leave a lost host's runtimes behind: a release sent to its queue (not awaited) runs
        if the host comes back while the session lives; its sweep removes them otherwise."""
        if placed.prewarm is not None and not placed.prewarm.done():
            placed.prewarm.cancel()
        if placed.runtime is None or placed.host is None:
            return
        eval_handle = placed.runtime.model_copy(
            update={"session_id": f"{spec.session_id}-eval", "workdir": ""}
        )
        release = stages.RELEASE_RUNTIME
        for handle in (placed.runtime, eval_handle):
            workflow.start_activity(
                release.activity,
                handle,
                task_queue=placed.host.of(release.pool),
                start_to_close_timeout=release.start_to_close(self._timeouts),
                retry_policy=release.retry_policy(self._timeouts),
                priority=self._priority,
            )

    async def _cancelled(
        self,
        spec: SessionSpec,
        result: SessionResult,
        placed: _Placed,
        queues: Queues,
    ) -> SessionResult:
        """Mark the session cancelled, tear its runtime down, end the workflow as cancelled."""
        result.status = SessionStatus.CANCELLED
        self._finish(result)
        if self._pending_upserts:  # the workflow ends without a stage `done`: send them now
            workflow.upsert_search_attributes(
                [sa.STAGE.value_set(Stage.TEARDOWN.value), *self._pending_upserts]
            )
            self._pending_upserts = []
        await self._teardown(spec, result, placed, queues)
        raise asyncio.CancelledError("session cancelled")

    def _queue(self, stage: StageActivity, queues: Queues, host: HostQueues | None) -> str:
        """Where `stage` goes: its pool's queue on the runtime's host when it follows the
        runtime and the runtime has a host queue, else its pool's shared queue."""
        if stage.on_host and host is not None:
            return host.of(stage.pool)
        assert stage.pool is not None, f"{stage.activity} has no shared queue"
        return queues.of(stage.pool)

    async def _stage(
        self,
        stage: StageActivity,
        arg: object,
        queues: Queues,
        host: HostQueues | None = None,
    ) -> Any:
        """Run one stage activity as the stage table says, with the session's heartbeat
        timeout; on a host queue with a schedule-to-start timeout (the host may be gone)."""
        hosted = stage.on_host and host is not None
        return await workflow.execute_activity(
            stage.activity,
            arg,
            result_type=stage.output,
            task_queue=self._queue(stage, queues, host),
            schedule_to_start_timeout=self._host_wait if hosted else None,
            start_to_close_timeout=stage.start_to_close(self._timeouts),
            heartbeat_timeout=self._heartbeat if stage.heartbeat else None,
            retry_policy=stage.retry_policy(self._timeouts),
            # on cancel, wait until the activity has stopped its processes, then tear down
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            priority=self._priority,
        )

    def _start_prewarm(
        self, spec: SessionSpec, queues: Queues, host: HostQueues | None
    ) -> workflow.ActivityHandle[RuntimeHandle]:
        """Start preparing the evaluator's fresh runtime (`{session}-eval`) on the session's
        host; not awaited here."""
        task = spec.task
        prewarm = stages.PREPARE_EVAL_RUNTIME
        return workflow.start_activity(
            prewarm.activity,
            PrepareRequest(
                session_id=f"{spec.session_id}-eval",
                task_id=task.task_id,
                runtime=task.evaluator.eval_runtime_spec(task.runtime),  # with its install
                source=task.source,
            ),
            result_type=RuntimeHandle,
            task_queue=self._queue(prewarm, queues, host),
            schedule_to_start_timeout=self._host_wait if host else None,
            start_to_close_timeout=prewarm.start_to_close(self._timeouts),
            heartbeat_timeout=self._heartbeat,
            retry_policy=prewarm.retry_policy(self._timeouts),
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
        result: SessionResult,
        placed: _Placed,
        queues: Queues,
    ) -> None:
        """Release the runtime (and the prewarmed evaluator runtime, if one was started) on
        the host holding them; runs on success, failure and cancellation alike. What teardown
        could not do is in the result's warnings."""
        self._enter(Stage.TEARDOWN, "releasing the runtime")
        if placed.releases:  # started as soon as the runtimes were done with
            for handle, queue, release in placed.releases:
                await self._release(result, handle, queue, placed, release)
            return
        teardown = stages.TEARDOWN
        shared = self._queue(teardown, queues, None)
        on = self._queue(teardown, queues, placed.host)
        handle = placed.runtime or RuntimeHandle(
            kind=spec.task.runtime.kind, session_id=spec.session_id, workdir="", host=""
        )
        if placed.runtime is None:  # nothing prepared (or left on a lost host): close only
            on = shared
        await self._release(result, handle, on, placed)
        if placed.prewarm is None:
            return
        await self._release(result, await self._eval_handle(spec, placed), on, placed)

    def _release_early(self, spec: SessionSpec, placed: _Placed, queues: Queues) -> None:
        """Start releasing the session's runtime and its evaluator's (prewarm done: the
        evaluator has run) now, side by side; `_teardown` awaits them. Build and score only
        touch S3, so a slow container removal no longer delays the session's result."""
        if placed.runtime is None:
            return
        on = self._queue(stages.TEARDOWN, queues, placed.host)
        handles = [placed.runtime]
        if placed.prewarm is not None and placed.prewarm.done():
            handles.append(self._finished_eval_handle(spec, placed, placed.prewarm))
        placed.releases = [(h, on, self._start_release(h, on, placed)) for h in handles]

    async def _eval_handle(self, spec: SessionSpec, placed: _Placed) -> RuntimeHandle:
        """The handle to release the evaluator's runtime by: its prewarm stopped first if it
        still runs (then what it made is removed by id)."""
        prewarm = placed.prewarm
        assert prewarm is not None
        if not prewarm.done():  # still preparing: stop it, then remove what it made
            prewarm.cancel()
        with contextlib.suppress(ActivityError, asyncio.CancelledError):
            await prewarm
        return self._finished_eval_handle(spec, placed, prewarm)

    def _finished_eval_handle(
        self,
        spec: SessionSpec,
        placed: _Placed,
        prewarm: workflow.ActivityHandle[RuntimeHandle],
    ) -> RuntimeHandle:
        """The evaluator runtime's handle from its ended prewarm; a bare one if it failed."""
        if not prewarm.cancelled() and prewarm.exception() is None:
            eval_handle = prewarm.result()
            if placed.host:  # the evaluator may have removed it already: not an error
                eval_handle = eval_handle.model_copy(update={"workdir": ""})
            return eval_handle
        return RuntimeHandle(
            kind=spec.task.runtime.kind,
            session_id=f"{spec.session_id}-eval",
            workdir="",
            host="",
            host_id=placed.runtime.host_id if placed.runtime else None,
        )

    def _start_release(
        self, handle: RuntimeHandle, queue: str, placed: _Placed
    ) -> workflow.ActivityHandle[Any]:
        teardown = stages.TEARDOWN
        hosted = placed.host is not None and queue == placed.host.of(teardown.pool)
        return workflow.start_activity(
            teardown.activity,
            handle,
            task_queue=queue,
            schedule_to_start_timeout=self._host_wait if hosted else None,
            start_to_close_timeout=teardown.start_to_close(self._timeouts),
            retry_policy=teardown.retry_policy(self._timeouts),
            priority=self._priority,
        )

    async def _release(
        self,
        result: SessionResult,
        handle: RuntimeHandle,
        queue: str,
        placed: _Placed,
        started: workflow.ActivityHandle[Any] | None = None,
    ) -> None:
        """Release `handle` (its teardown `started` already, or started now); a failure is a
        warning of the result, a silent host's probed first."""
        hosted = placed.host is not None and queue == placed.host.of(stages.TEARDOWN.pool)
        try:
            await (started or self._start_release(handle, queue, placed))
        except ActivityError as exc:
            if (
                hosted
                and _silence(exc)
                and placed.host
                and not await self._alive(placed.host.probe)
            ):
                note = f"host {_host_of(placed)} lost: its sweep removes {handle.session_id}"
            else:
                note = f"teardown of {handle.session_id} failed: {_error_text(exc)}"
            workflow.logger.warning(note)
            result.warnings.append(note)


@dataclass
class _Placed:
    """One placement of a session: its runtime, the host holding it, the evaluator prewarm."""

    runtime: RuntimeHandle | None = None
    host: HostQueues | None = None
    prewarm: workflow.ActivityHandle[RuntimeHandle] | None = None
    # teardowns started early: (handle, queue, its activity)
    releases: list[tuple[RuntimeHandle, str, workflow.ActivityHandle[Any]]] | None = None


class _HostLost(Exception):
    """The host holding the session's runtime stopped answering during `stage`."""

    def __init__(self, host_id: str, stage: str, detail: str) -> None:
        super().__init__(f"{stage}: host {host_id} lost ({detail})")
        self.host_id, self.stage, self.detail = host_id, stage, detail


def _silence(exc: ActivityError) -> TimeoutType | None:
    """SCHEDULE_TO_START or HEARTBEAT when the activity failed for want of a worker."""
    cause = exc.cause
    if isinstance(cause, TimeoutError) and cause.type in (
        TimeoutType.SCHEDULE_TO_START,
        TimeoutType.HEARTBEAT,
    ):
        return cause.type
    return None


def _host_of(placed: _Placed) -> str:
    runtime = placed.runtime
    return (runtime.host_id or runtime.host) if runtime else "?"

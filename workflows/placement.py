"""Where a session's runtimes live: its host, that host's liveness, re-placement and release.

`Placement` is the Session workflow's (workflows/session.py) one view of its runtimes.
`prepare` runs `prepare_runtime` on the shared init queue; the handle it returns names the
host holding the runtime and that host's queue prefix (workflows/queues.py), and every
later stage that touches the runtime goes to that host's `-init`/`-run`/`-postrun` queues
with a schedule-to-start timeout (`on_host`). Where the session's evaluator grades in a
fresh runtime (`SessionSpec.fresh_eval_runtime`, the evaluator's own declaration), that
runtime (`{session}-eval`, the instance's install included) is prepared on the same host
while the harness runs (`prepare_eval_runtime`), off the critical path.

A host-queue stage not started in time (or a run whose heartbeat stopped) makes the
placement probe the host (`host_alive` on its probe queue): a busy host gets the stage
again; a silent one is lost (`HostLost`). The session then gives the lost host up
(`give_up`: a `release_runtime` of each runtime sent to its queue, run if it comes back
while the session lives, and its sweep, activities/host_sweep.py, otherwise) and is
prepared again on another host, up to the task's `max_attempts` placements.

The runtimes are released as soon as nothing needs them (`release_early`, beside the
stages that only touch S3) and at the latest by `release` (teardown), on success, failure
and cancellation alike; what could not be released is a warning of the session's result.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    TimeoutError,
    TimeoutType,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from polar.contracts import PrepareRequest, RuntimeHandle, SessionSpec, TeardownResult
    from polar.gpus import GpuPlacement
    from workflows import stages
    from workflows.queues import HostQueues
    from workflows.stage_calls import In, Out, StageCalls
    from workflows.stages import StageActivity


class HostLost(Exception):
    """The host holding the session's runtime stopped answering during `stage`."""

    def __init__(self, host_id: str, stage: str, detail: str) -> None:
        super().__init__(f"{stage}: host {host_id} lost ({detail})")
        self.host_id, self.stage, self.detail = host_id, stage, detail


GPU_PLACEMENT = "gpu-placement"
"""The patch id of GPU sessions' placement on hosts that declare GPUs (`place_gpu_session`)."""
AVOID_TRIES = 2
"""Tries of a renewed placement's prepare that a host to avoid declines (`AvoidedHost`)."""


@dataclass
class _Release:
    """A teardown started early: the runtime, the queue it went to, its activity."""

    handle: RuntimeHandle
    queue: str
    activity: workflow.ActivityHandle[TeardownResult]


@dataclass
class Placement:
    """The session's runtime, the host holding it and its evaluator's prewarmed runtime, for
    the current placement; `placements` counts those made so far."""

    calls: StageCalls
    spec: SessionSpec
    placements: int = 0
    runtime: RuntimeHandle | None = None
    host: HostQueues | None = None
    prewarm: workflow.ActivityHandle[RuntimeHandle] | None = None
    releases: list[_Release] = field(default_factory=list)
    avoid: list[str] = field(default_factory=list)
    """Hosts whose own fault ended an earlier placement: the next prepare avoids them."""

    @property
    def host_id(self) -> str:
        """The host holding the runtime ("?" before one is prepared)."""
        runtime = self.runtime
        return (runtime.host_id or runtime.host) if runtime else "?"

    async def prepare(self) -> RuntimeHandle:
        """A new placement: the session's runtime, prepared on whichever host the shared
        init queue finds; its evaluator's fresh runtime starts preparing on that host."""
        self.placements += 1
        self.runtime, self.host, self.prewarm, self.releases = None, None, None, []
        task = self.spec.task
        request = PrepareRequest(
            session_id=self.spec.session_id,
            task_id=task.task_id,
            runtime=task.runtime,
            source=task.source,
            avoid_hosts=list(self.avoid),
            # declined there at most twice, and never on the last try
            avoid_tries=min(AVOID_TRIES, task.timeouts.max_attempts - 1) if self.avoid else 0,
            step_users=sorted({s.harness_user for s in task.steps if s.harness_user}),
            step_networks=[s.network for s in task.steps if s.network and not s.network.sealed],
        )
        if task.runtime.gpus and workflow.patched(GPU_PLACEMENT):
            runtime = await self._prepare_on_gpu_host(request)
        else:
            runtime = await self.calls.execute(stages.PREPARE_RUNTIME, request)
        self.runtime = runtime
        if runtime.host_queue:  # stages that touch the runtime go to its host's queues
            self.host = HostQueues.for_prefix(runtime.host_queue)
        return runtime

    async def _prepare_on_gpu_host(self, request: PrepareRequest) -> RuntimeHandle:
        """A GPU session's prepare, on a host whose worker declares the GPUs it asks for
        (`place_gpu_session` picks it from the GPU queue's pollers, polar/gpus.py), never on
        the shared init queue. A host that does not start it within the host wait is probed:
        alive (only busy), it is asked again; silent, another host is picked, up to
        `max_attempts` silent ones (then `HostLost`: the session is placed again)."""
        runtime = self.spec.task.runtime
        passed: list[str] = []
        while True:
            ask = GpuPlacement(
                session_id=self.spec.session_id,
                gpus=runtime.gpus,
                gpu_types=runtime.gpu_types,
                avoid_hosts=[*self.avoid, *passed],
            )
            pick = await self.calls.execute(stages.PLACE_GPU_SESSION, ask)
            host = HostQueues.for_prefix(pick.host_queue)
            try:
                return await self.calls.start_on(
                    stages.PREPARE_RUNTIME,
                    request,
                    host.of(stages.PREPARE_RUNTIME.pool),
                    schedule_to_start=self.calls.host_wait,
                    wait_cancellation=True,
                )
            except ActivityError as exc:
                if _silence(exc) != TimeoutType.SCHEDULE_TO_START:
                    raise
                self.host = host  # probed as `on_host` probes: alive, it is only busy
                alive = await self.alive()
                self.host = None
                if alive:
                    continue
                if len(passed) + 1 >= self.spec.task.timeouts.max_attempts:
                    raise HostLost(pick.host_id, "prepare_runtime", error_text(exc)) from None
                passed.append(pick.host_id)

    def start_prewarm(self) -> None:
        """Start preparing the evaluator's fresh runtime (`{session}-eval`) on the session's
        host, where the evaluator grades in one; not awaited here."""
        if not self.spec.fresh_eval_runtime:
            return
        task = self.spec.task
        request = PrepareRequest(
            session_id=f"{self.spec.session_id}-eval",
            task_id=task.task_id,
            runtime=task.evaluator.eval_runtime_spec(task.runtime),  # with its install
            source=task.source,
        )
        self.prewarm = self.calls.start(stages.PREPARE_EVAL_RUNTIME, request, self.host)

    async def prewarmed(self) -> RuntimeHandle | None:
        """The prewarmed evaluator runtime; None (the evaluator prepares it) if there is none
        or it failed."""
        if self.prewarm is None:
            return None
        try:
            return await self.prewarm
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            workflow.logger.warning("evaluator prewarm failed, preparing it later: %s", exc)
            return None

    async def on_host(self, stage: StageActivity[In, Out], request: Callable[[int], In]) -> Out:
        """`stage` on the runtime's host: not started there within the host wait (or its last
        attempt's heartbeat lost), the host is probed; alive, a stage that never started is
        issued again (`request(issue)`, issue 1, 2, ...: the host is only busy); silent,
        `HostLost`."""
        issue = 0
        while True:
            try:
                return await self.calls.execute(stage, request(issue), self.host)
            except ActivityError as exc:
                silence = _silence(exc)
                if self.host is None or silence is None:
                    raise
                if not await self.alive():
                    raise HostLost(self.host_id, stage.activity, error_text(exc)) from None
                if silence != TimeoutType.SCHEDULE_TO_START:
                    raise  # the host is up: the stage itself stopped answering
                issue += 1

    async def alive(self) -> bool:
        """Whether a worker of the host answers on its probe queue within the probe wait."""
        assert self.host is not None
        try:
            await self.calls.start_on(
                stages.HOST_ALIVE,
                None,
                self.host.probe,
                schedule_to_start=self.calls.probe_wait,
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            return False
        return True

    def give_up(self) -> bool:
        """Leave a lost host's runtimes behind: a release sent to its queue (not awaited) runs
        if the host comes back while the session lives; its sweep removes them otherwise.
        Whether the session may be prepared again elsewhere (fewer than `max_attempts`
        placements so far); if not, teardown only closes the session."""
        if self.prewarm is not None and not self.prewarm.done():
            self.prewarm.cancel()
        if self.runtime is not None and self.host_id not in self.avoid:
            self.avoid.append(self.host_id)  # back or not, the next placement goes elsewhere
        if self.runtime is not None and self.host is not None:
            eval_handle = self.runtime.model_copy(
                update={"session_id": f"{self.spec.session_id}-eval", "workdir": ""}
            )
            release = stages.RELEASE_RUNTIME
            for handle in (self.runtime, eval_handle):
                self.calls.start_on(release, handle, self.host.of(release.pool))
        if self.placements < self.spec.task.timeouts.max_attempts:
            return True
        self.runtime = self.prewarm = None
        return False

    @property
    def renewable(self) -> bool:
        """Whether the session may still be run again on fresh ground: not once its runtimes'
        early teardown started (`release_early`), which closes the session at the gateway."""
        return not self.releases

    async def renew(self, host_fault: bool = False) -> list[str]:
        """Give this placement's runtimes up for a fresh one: the session's run ended
        `infra_error` on them (polar/outcomes.py). Each is released (`release_runtime`: the
        session stays open for its next run) and awaited, since the next runtime has the same
        id and may land on the same host; what could not be released, as warnings. A
        `host_fault` (the host's own) makes the next prepare avoid this host."""
        notes: list[str] = []
        if host_fault and self.runtime is not None and self.host_id not in self.avoid:
            self.avoid.append(self.host_id)
        if self.runtime is not None:
            release = stages.RELEASE_RUNTIME
            queue = self.calls.queue(release, self.host)
            handles = [self.runtime]
            if self.prewarm is not None:
                handles.append(await self._eval_handle(self.prewarm))
            wait = self.calls.host_wait if self.host is not None else None
            for handle in handles:
                try:
                    await self.calls.start_on(release, handle, queue, schedule_to_start=wait)
                except ActivityError as exc:
                    if is_cancelled_exception(exc):
                        raise
                    notes.append(f"release of {handle.session_id} failed: {error_text(exc)}")
        self.runtime, self.prewarm, self.releases = None, None, []
        return notes

    def release_early(self) -> None:
        """Start releasing the session's runtime and its evaluator's (prewarm done: the
        evaluator has run) now, side by side; `release` awaits them. Build and score only
        touch S3, so a slow container removal no longer delays the session's result."""
        if self.runtime is None:
            return
        queue = self.calls.queue(stages.TEARDOWN, self.host)
        handles = [self.runtime]
        if self.prewarm is not None and self.prewarm.done():
            handles.append(self._finished_eval_handle(self.prewarm))
        self.releases = [_Release(h, queue, self._start_teardown(h, queue)) for h in handles]

    async def release(self) -> list[str]:
        """Tear the runtime (and the prewarmed evaluator runtime, if one was started) down on
        the host holding them, and close the session; what could not be done, as warnings."""
        if self.releases:  # started as soon as the runtimes were done with
            return [
                note
                for r in self.releases
                if (note := await self._released(r.handle, r.queue, r.activity))
            ]
        queue = self.calls.queue(stages.TEARDOWN, self.host)
        handle = self.runtime
        if handle is None:  # nothing prepared (or left on a lost host): close the session only
            handle = RuntimeHandle(
                kind=self.spec.task.runtime.kind,
                session_id=self.spec.session_id,
                workdir="",
                host="",
            )
            queue = self.calls.queue(stages.TEARDOWN, None)
        notes = [await self._released(handle, queue)]
        if self.prewarm is not None:
            notes.append(await self._released(await self._eval_handle(self.prewarm), queue))
        return [note for note in notes if note]

    async def _eval_handle(self, prewarm: workflow.ActivityHandle[RuntimeHandle]) -> RuntimeHandle:
        """The handle to release the evaluator's runtime by: its prewarm stopped first if it
        still runs (then what it made is removed by id)."""
        if not prewarm.done():  # still preparing: stop it, then remove what it made
            prewarm.cancel()
        with contextlib.suppress(ActivityError, asyncio.CancelledError):
            await prewarm
        return self._finished_eval_handle(prewarm)

    def _finished_eval_handle(
        self, prewarm: workflow.ActivityHandle[RuntimeHandle]
    ) -> RuntimeHandle:
        """The evaluator runtime's handle from its ended prewarm; a bare one if it failed."""
        if not prewarm.cancelled() and prewarm.exception() is None:
            eval_handle = prewarm.result()
            if self.host:  # the evaluator may have removed it already: not an error
                eval_handle = eval_handle.model_copy(update={"workdir": ""})
            return eval_handle
        return RuntimeHandle(
            kind=self.spec.task.runtime.kind,
            session_id=f"{self.spec.session_id}-eval",
            workdir="",
            host="",
            host_id=self.runtime.host_id if self.runtime else None,
        )

    def _hosted(self, queue: str) -> bool:
        return self.host is not None and queue == self.host.of(stages.TEARDOWN.pool)

    def _start_teardown(
        self, handle: RuntimeHandle, queue: str
    ) -> workflow.ActivityHandle[TeardownResult]:
        return self.calls.start_on(
            stages.TEARDOWN,
            handle,
            queue,
            schedule_to_start=self.calls.host_wait if self._hosted(queue) else None,
        )

    async def _released(
        self,
        handle: RuntimeHandle,
        queue: str,
        started: workflow.ActivityHandle[TeardownResult] | None = None,
    ) -> str | None:
        """Release `handle` (its teardown `started` already, or started now); a failure is a
        warning (returned and logged), a silent host's probed first."""
        try:
            await (started or self._start_teardown(handle, queue))
        except ActivityError as exc:
            if self._hosted(queue) and _silence(exc) and not await self.alive():
                note = f"host {self.host_id} lost: its sweep removes {handle.session_id}"
            else:
                note = f"teardown of {handle.session_id} failed: {error_text(exc)}"
            workflow.logger.warning(note)
            return note
        return None


def error_text(exc: BaseException) -> str:
    """The innermost cause's message: what actually went wrong in the activity."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}"


def error_type(exc: ActivityError) -> str:
    """The failed activity's error type: its ApplicationError's type (the exception's class
    name, or a Polar type such as `RuntimeUnfit`), else the kind of timeout."""
    cause = exc.cause
    if isinstance(cause, ApplicationError) and cause.type:
        return cause.type
    if isinstance(cause, TimeoutError):
        return f"Timeout{cause.type.name.title().replace('_', '')}" if cause.type else "Timeout"
    return type(cause).__name__ if cause is not None else "ActivityError"


def _silence(exc: ActivityError) -> TimeoutType | None:
    """SCHEDULE_TO_START or HEARTBEAT when the activity failed for want of a worker."""
    cause = exc.cause
    if isinstance(cause, TimeoutError) and cause.type in (
        TimeoutType.SCHEDULE_TO_START,
        TimeoutType.HEARTBEAT,
    ):
        return cause.type
    return None

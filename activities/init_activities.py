"""The init pool's activities: prepare a session's runtimes, tear them down, store specs."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.evaluators.baseline import record_baseline
from activities.heartbeat import Heartbeater, heartbeat
from activities.pool_activities import PoolActivities
from activities.runtime_claims import RuntimeClaims
from activities.runtimes import (
    InvalidRuntime,
    InvalidSource,
    PrepareFailed,
    UnknownRuntime,
    check_runtime,
)
from activities.runtimes.network.egress import egress_refusal, with_local_hosts
from polar.contracts import PrepareRequest, RuntimeHandle, TeardownResult, invalid_input
from polar.gpus import GpuHost, GpuOffer, GpuPlacement, fitting, gpu_offers, gpu_refusal
from polar.host_paths import local_git_path, outside_roots, source_roots
from polar.ids import InvalidId
from polar.settings import WorkerSettings
from polar.storage import Storage
from polar.tasks.spec import DirSource, GitSource, UploadAction
from workflows.queues import host_queue_prefix


def check_source_roots(
    request: PrepareRequest, roots: tuple[Path, ...], data_dir: Path | None = None
) -> None:
    """Every host path the task reads (source.path, a local git url, upload srcs) lies,
    resolved, under a source root and never in the stack's `data_dir` (its database,
    secrets, every session's runtime), even where a root holds it (InvalidSource otherwise,
    naming the field)."""
    paths: list[tuple[str, Path]] = []
    if isinstance(request.source, DirSource):
        paths.append(("source.path", Path(request.source.path)))
    elif isinstance(request.source, GitSource):
        local = local_git_path(request.source.url)
        if local is not None:
            paths.append(("git url", local))
    for index, action in enumerate(request.runtime.prepare):
        if isinstance(action, UploadAction):
            paths.append((f"runtime.prepare[{index}].src", Path(action.src)))
    state = data_dir.resolve() if data_dir is not None else None
    for what, path in paths:
        problem = outside_roots(path, roots)
        if problem is not None:
            raise InvalidSource(f"{what} {path} {problem}")
        real = path.resolve()
        if state is not None and (real == state or real.is_relative_to(state)):
            raise InvalidSource(
                f"{what} {path} resolves to {real}, inside the data dir {state} (the stack's "
                "state and secrets): a task may not read it"
            )


class InitActivities(PoolActivities):
    """The init pool (`{queue}-init`, and this host's `-init` queue for its runtimes)."""

    def __init__(self, settings: WorkerSettings, storage: Storage) -> None:
        super().__init__(settings, storage)
        self.claims = RuntimeClaims(Path(settings.data_dir))

    def _on_this_host(self, handle: RuntimeHandle) -> RuntimeHandle:
        """`handle` stamped with this host's id and queue prefix: where later stages go."""
        return handle.model_copy(
            update={
                "host_id": self.settings.host_id,
                "host_queue": host_queue_prefix(self.settings.task_queue, self.settings.host_id),
            }
        )

    @activity.defn(name="prepare_runtime")
    async def prepare_runtime(self, request: PrepareRequest) -> RuntimeHandle:
        if (
            self.settings.host_id in request.avoid_hosts
            and activity.info().attempt <= request.avoid_tries
        ):  # this host's own fault ended the last placement: let another host take it
            raise ApplicationError(
                f"host {self.settings.host_id!r} ended an earlier placement of "
                f"{request.session_id} by its own fault: left to another host",
                type="AvoidedHost",
            )
        self._check_gpus(request)
        try:  # a kind no runtime serves fails at once, not retried
            check_runtime(request.runtime)
        except UnknownRuntime as exc:
            raise invalid_input(str(exc), "InvalidTaskSpec") from None
        runtime = self._runtime(request.runtime.kind)
        # a container start, a clone or a big copy must not look like a dead worker
        async with Heartbeater(step="preparing", runtime=request.runtime.kind) as hb:
            try:
                check_source_roots(
                    request,
                    source_roots(self.settings.source_roots),
                    Path(self.settings.data_dir),
                )
                for network in (request.runtime.network, *request.step_networks):
                    refusal = egress_refusal(network, self.settings)
                    if refusal is not None:  # asking for network, on a worker without egress
                        raise invalid_input(refusal, "InvalidTaskSpec")
                # first: an earlier placement's late release leaves what follows alone
                claim = await self.claims.claim(request.session_id)
                try:
                    handle = await runtime.prepare(request)
                except BaseException:  # no runtime holds the claim: none is left behind
                    await self.claims.drop(request.session_id, claim)
                    raise
                handle = handle.model_copy(update={"runtime_id": claim})
            except (InvalidSource, InvalidRuntime, PrepareFailed) as exc:
                raise invalid_input(str(exc), type(exc).__name__) from exc
            if not request.runtime.network.sealed:  # admitted: the run serves it
                handle = handle.model_copy(update={"network": request.runtime.network})
            handle = with_local_hosts(handle, request.runtime)
            # the commit the session's changes are diffed against (git init for a plain folder)
            hb.update(step="recording the workspace baseline")
            handle = await record_baseline(runtime, handle)
        return self._on_this_host(handle)  # later stages come to this host's queues

    def _check_gpus(self, request: PrepareRequest) -> None:
        """A session asking for more GPUs (or other types) than this worker declares is refused
        (non-retryable): GPU sessions are placed only on hosts that declare them."""
        spec, settings = request.runtime, self.settings
        if spec.gpus and not fitting(
            [GpuOffer(settings.host_id, settings.gpus, tuple(settings.gpu_types))],
            spec.gpus,
            spec.gpu_types,
        ):
            types = f" of type {' or '.join(spec.gpu_types)}" if spec.gpu_types else ""
            raise invalid_input(
                f"the task asks for {spec.gpus} GPU(s){types}; host {settings.host_id!r} "
                f"declares {settings.gpus} {settings.gpu_types or ''} (POLAR_GPUS, "
                "POLAR_GPU_TYPES)",
                "InvalidTaskSpec",
            )

    @activity.defn(name="place_gpu_session")
    async def place_gpu_session(self, request: GpuPlacement) -> GpuHost:
        """A host for a GPU session: one of those whose worker declares at least its GPUs of
        one of its types (the GPU queue's pollers, polar/gpus.py), its hosts to avoid left
        out where another fits. None fits: `NoGpuWorker`, retried (a worker may come back)."""
        queue = self.settings.task_queue
        offers = await gpu_offers(activity.client(), self.settings.temporal_namespace, queue)
        fit = fitting(offers, request.gpus, request.gpu_types)
        if not fit:
            reason = gpu_refusal(offers, request.gpus, request.gpu_types, queue)
            raise ApplicationError(reason, type="NoGpuWorker")
        preferred = [o for o in fit if o.host not in request.avoid_hosts] or fit
        pick = random.choice(preferred)
        return GpuHost(
            host_id=pick.host,
            host_queue=host_queue_prefix(queue, pick.host),
            count=pick.count,
            types=list(pick.types),
        )

    @activity.defn(name="prepare_eval_runtime")
    async def prepare_eval_runtime(self, request: PrepareRequest) -> RuntimeHandle:
        """The evaluator's fresh runtime, prepared while the harness runs (evaluator prewarm);
        the workflow passes it to `evaluate` and tears it down whatever happens."""
        return await self.prepare_runtime(request)

    @activity.defn(name="teardown")
    async def teardown(self, handle: RuntimeHandle) -> TeardownResult:
        """Close the session (the gateway refuses its keys from now on), then release its
        runtime. Only a session's final teardown: a runtime given up for a new attempt is
        released without closing the session (its attempt closed when its run ended)."""
        heartbeat(step="teardown")
        self._check_host(handle, "teardown")
        await asyncio.to_thread(self.storage.mark_closed, handle.session_id)
        return await self._remove_runtime(handle)

    @activity.defn(name="release_runtime")
    async def release_runtime(self, handle: RuntimeHandle) -> TeardownResult:
        """Remove a runtime the session gave up (its host was lost; it went on elsewhere),
        without closing the session; sent to that host's queue, it runs if the host returns."""
        heartbeat(step="releasing a given-up runtime")
        self._check_host(handle, "release_runtime")
        return await self._remove_runtime(handle)

    async def _remove_runtime(self, handle: RuntimeHandle) -> TeardownResult:
        """Tear `handle` down while its claim holds the runtime (a newer placement's runtime
        of the same session is left alone: found False); a prepared runtime (it has a
        workdir) that is not here is a non-retryable `RuntimeNotFound`, never a quiet
        success."""
        if handle.runtime_id is None:
            return await self._removed(handle)
        try:
            async with self.claims.held(handle.session_id, handle.runtime_id) as mine:
                if not mine:
                    activity.logger.warning(
                        "%s: a newer placement holds its runtime here; left alone",
                        handle.session_id,
                    )
                    return TeardownResult(
                        session_id=handle.session_id, host_id=self.settings.host_id, found=False
                    )
                return await self._removed(handle)
        except InvalidId as exc:
            raise invalid_input(str(exc), "InvalidRuntime") from exc

    async def _removed(self, handle: RuntimeHandle) -> TeardownResult:
        try:
            found = await self._runtime(handle.kind).teardown(handle)
        except InvalidRuntime as exc:  # e.g. a session id that is not a safe path
            raise invalid_input(str(exc), "InvalidRuntime") from exc
        if not found and handle.workdir:
            raise invalid_input(
                f"teardown: no {handle.kind} runtime of {handle.session_id} on host "
                f"{self.settings.host_id!r} (prepared on {handle.host_id or handle.host!r}); "
                "nothing was removed",
                "RuntimeNotFound",
            )
        return TeardownResult(
            session_id=handle.session_id, host_id=self.settings.host_id, found=found
        )

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.prepare_runtime,
            self.place_gpu_session,
            self.prepare_eval_runtime,
            self.teardown,
            self.release_runtime,
            self.specs.store_task_spec,
        ]

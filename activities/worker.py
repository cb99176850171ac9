"""A Polar worker process: workflow and stage queues, each with its own concurrency cap.

`polar worker --queues workflow,init,run,postrun` serves any subset, so pools
can be split across hosts (e.g. many `run` workers near the runtimes, a few
`postrun` workers). Every worker shares one Temporal and one S3.

A worker serving a stage pool also serves that pool's queue of its own host
(`{queue}-host-{host_id}-init/-run/-postrun`, workflows/queues.py), where the
stages that touch a runtime it prepared come, with the pool's cap (its own
slots: a host's `-run` queue runs at most `max_run` harnesses), and the host's
probe queue (`{queue}-host-{host_id}`: `host_alive`); an init worker whose host declares GPUs
(`POLAR_GPUS`) polls the deployment's GPU queue too (polar/gpus.py). A `polar worker` also
sweeps its host's runtimes of closed sessions at start and on a timer
(activities/host_sweep.py). Before it polls, a worker adds Polar's search attributes its
namespace lacks (polar/search_attributes.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.activity import _Definition as _ActivityDefinition
from temporalio.client import Client
from temporalio.worker import Interceptor, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.evaluators import kinds_needing_fresh_runtime
from activities.host_sweep import release_host, sweep_forever
from activities.init_activities import InitActivities
from activities.observability import StageInterceptor, start_observability
from activities.pool_activities import HostProbeActivities, PoolActivities
from activities.postrun_activities import PostrunActivities
from activities.run_activities import RunActivities
from polar import search_attributes
from polar.credentials import refuse_weak_secrets
from polar.gpus import GpuOffer, gpu_queue
from polar.settings import WorkerSettings
from polar.storage import Storage
from polar.temporal_client import connect
from workflows.queues import HostQueues, Queues
from workflows.rollout_task import RolloutTask, SessionBatch
from workflows.session import Session
from workflows.stages import POOLS, STAGE_ACTIVITIES, Pool

POOL_ACTIVITIES: dict[Pool | None, type[PoolActivities]] = {
    Pool.INIT: InitActivities,
    Pool.RUN: RunActivities,
    Pool.POSTRUN: PostrunActivities,
    None: HostProbeActivities,
}
"""The activities class of each pool (None: a host's probe queue)."""
STAGES = ("workflow", *(p.value for p in POOLS))
"""What a worker can serve: the workflow queue and each stage pool (workflows/stages.py)."""
PROBE_SLOTS = 16  # host_alive answers at once, whatever the stage pools are doing
# the project's modules are deterministic at import (definitions only, no I/O): the sandbox
# takes them from the worker instead of re-importing them for every workflow run
PASSTHROUGH_MODULES = ("polar", "workflows", "pydantic", "pydantic_core")
log = logging.getLogger("polar.worker")


def build_workers(
    client: Client,
    settings: WorkerSettings,
    stages: tuple[str, ...] = STAGES,
    interceptors: tuple[Interceptor, ...] | None = None,
) -> list[Worker]:
    """One temporalio Worker per served queue; stage activities are timed and log with ids."""
    if interceptors is None:
        interceptors = (StageInterceptor(),)
    queues = Queues.for_workflow_queue(settings.task_queue)
    host = HostQueues.for_host(settings.task_queue, settings.host_id)
    by_pool = activities_by_pool(settings, Storage(settings))
    caps = {
        Pool.INIT: settings.max_init,
        Pool.RUN: settings.max_run,
        Pool.POSTRUN: settings.max_postrun,
    }
    workers: list[Worker] = []

    def activity_worker(queue: str, served: list[Callable[..., Any]], cap: int) -> Worker:
        return Worker(
            client,
            task_queue=queue,
            activities=served,
            max_concurrent_activities=cap,
            graceful_shutdown_timeout=timedelta(seconds=settings.shutdown_grace_s),
            interceptors=list(interceptors),
        )

    for stage in stages:
        if stage == "workflow":
            # which evaluators grade in a fresh runtime is theirs to say (activities/evaluators)
            RolloutTask.declare_evaluators(kinds_needing_fresh_runtime())
            workers.append(
                Worker(
                    client,
                    task_queue=queues.workflow,
                    workflows=[RolloutTask, SessionBatch, Session],
                    workflow_runner=workflow_runner(),
                )
            )
            continue
        pool = Pool(stage)  # the shared queue, and this host's queue of the same pool
        workers.append(activity_worker(queues.of(pool), by_pool[pool], caps[pool]))
        workers.append(activity_worker(host.of(pool), by_pool[pool], caps[pool]))
    if set(stages) - {"workflow"}:
        workers.append(activity_worker(host.probe, by_pool[None], PROBE_SLOTS))
        if Pool.INIT.value in stages and settings.gpus > 0:  # this host's GPUs, declared
            workers.append(gpu_worker(client, settings, by_pool[None]))
    return workers


def gpu_worker(client: Client, settings: WorkerSettings, probe: list[Callable[..., Any]]) -> Worker:
    """The poller of the deployment's GPU queue (polar/gpus.py) whose identity declares this
    host's GPUs: what `polar submit` and the GPU placement read. It serves only the host
    probe; a GPU session's stages come to this host's own queues."""
    offer = GpuOffer(settings.host_id, settings.gpus, tuple(settings.gpu_types))
    return Worker(
        client,
        task_queue=gpu_queue(settings.task_queue),
        activities=probe,
        max_concurrent_activities=PROBE_SLOTS,
        identity=offer.identity(),
    )


async def leave(workers: list[Worker], settings: WorkerSettings) -> None:
    """Stop every queue's polling at once, let running stages finish for up to
    `shutdown_grace_s` (then they are cancelled, and reap what they ran), and with
    `release_on_exit` remove every runtime of this host: its sessions' host probes go
    unanswered, so they are re-placed on other hosts (workflows/session.py)."""
    log.info(
        "worker leaving: no new work; running stages have %.0fs to finish",
        settings.shutdown_grace_s,
    )
    await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
    if settings.release_on_exit:
        report = await release_host(settings)
        log.warning("worker left host %s: runtimes removed %s", settings.host_id, report.removed)


def activities_by_pool(
    settings: WorkerSettings, storage: Storage
) -> dict[Pool | None, list[Callable[..., Any]]]:
    """Each pool's activity implementations, from its class (`POOL_ACTIVITIES`; None: a
    host's probe queue). They must match the stage table: every entry implemented, by the
    class of its pool, and nothing else."""
    grouped = {pool: cls(settings, storage).all() for pool, cls in POOL_ACTIVITIES.items()}
    check_pools(grouped)
    return grouped


def check_pools(grouped: dict[Pool | None, list[Callable[..., Any]]]) -> None:
    """RuntimeError unless `grouped` serves each activity of the stage table on its pool,
    and nothing else."""
    served = {activity_name(fn): pool for pool, fns in grouped.items() for fn in fns}
    missing = sorted(set(STAGE_ACTIVITIES) - set(served))
    extra = sorted(set(served) - set(STAGE_ACTIVITIES))
    misplaced = sorted(
        f"{name} (table: {STAGE_ACTIVITIES[name].pool}, served: {pool})"
        for name, pool in served.items()
        if name in STAGE_ACTIVITIES and STAGE_ACTIVITIES[name].pool != pool
    )
    if missing or extra or misplaced:
        raise RuntimeError(
            f"activities and the stage table disagree: unimplemented {missing}, "
            f"not in the table {extra}, on another pool {misplaced}"
        )


def activity_name(fn: Callable[..., Any]) -> str:
    """The Temporal activity name of an `@activity.defn` callable."""
    definition = _ActivityDefinition.from_callable(fn)
    if definition is None or definition.name is None:
        raise TypeError(f"{fn!r} is not an @activity.defn")
    return definition.name


def workflow_runner() -> SandboxedWorkflowRunner:
    """The default sandbox, with the project's modules passed through."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    return SandboxedWorkflowRunner(restrictions=restrictions)


@contextlib.asynccontextmanager
async def running_workers(
    settings: WorkerSettings, stages: tuple[str, ...] = STAGES
) -> AsyncIterator[None]:
    """Serve `stages` in this process for the duration of the block (tests, scripts)."""
    client = await connect(settings)
    await search_attributes.ensure_registered(client, settings.temporal_namespace)
    async with contextlib.AsyncExitStack() as stack:
        for worker in build_workers(client, settings, stages):
            await stack.enter_async_context(worker)
        yield


async def run_worker(settings: WorkerSettings, stages: tuple[str, ...] = STAGES) -> None:
    """Serve `stages` until SIGINT/SIGTERM, then shut down gracefully."""
    unknown = set(stages) - set(STAGES)
    if unknown:
        raise ValueError(f"unknown queues {sorted(unknown)}; choose from {STAGES}")
    refuse_weak_secrets(settings, "worker")
    Storage(settings).ensure_bucket()
    obs = start_observability(settings)  # metrics_port 0: None
    client = await connect(settings, runtime=obs.runtime if obs else None)
    await search_attributes.ensure_registered(client, settings.temporal_namespace)
    workers = build_workers(client, settings, stages, (obs.interceptor,) if obs else None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        for worker in workers:
            await stack.enter_async_context(worker)
        if obs:
            poller = asyncio.create_task(obs.metrics.poll_queue_depths(client, settings))
            stack.callback(poller.cancel)
        if set(stages) - {"workflow"}:  # this host's runtimes of closed sessions go
            sweeper = asyncio.create_task(sweep_forever(client, settings))
            stack.callback(sweeper.cancel)
        ready = os.environ.get("POLAR_WORKER_READY_FILE")
        if ready:
            Path(ready).write_text(str(os.getpid()))
        log.info("worker serving %s on %s", ",".join(stages), settings.temporal_address)
        try:
            await stop.wait()
            await leave(workers, settings)
        finally:
            if obs:
                obs.close()

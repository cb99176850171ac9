"""A Polar worker process: workflow and stage queues, each with its own concurrency cap.

`polar worker --queues workflow,init,run,postrun` serves any subset, so pools
can be split across hosts (e.g. many `run` workers near the runtimes, a few
`postrun` workers). Every worker shares one Temporal and one S3.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Interceptor, Worker

from activities.observability import StageInterceptor, start_observability
from activities.session_activities import SessionActivities
from polar.settings import Settings
from polar.storage import Storage
from polar.temporal_client import connect
from workflows.queues import Queues
from workflows.rollout_task import RolloutTask
from workflows.session import Session

STAGES = ("workflow", "init", "run", "postrun")
log = logging.getLogger("polar.worker")


def build_workers(
    client: Client,
    settings: Settings,
    stages: tuple[str, ...] = STAGES,
    interceptors: tuple[Interceptor, ...] | None = None,
) -> list[Worker]:
    """One temporalio Worker per served queue; stage activities are timed and log with ids."""
    if interceptors is None:
        interceptors = (StageInterceptor(),)
    queues = Queues.for_workflow_queue(settings.task_queue).by_stage()
    acts = SessionActivities(settings, Storage(settings)).all()
    caps = {"init": settings.max_init, "run": settings.max_run, "postrun": settings.max_postrun}
    workers: list[Worker] = []
    for stage in stages:
        if stage == "workflow":
            workers.append(
                Worker(client, task_queue=queues["workflow"], workflows=[RolloutTask, Session])
            )
        else:
            workers.append(
                Worker(
                    client,
                    task_queue=queues[stage],
                    activities=acts[stage],
                    max_concurrent_activities=caps[stage],
                    graceful_shutdown_timeout=timedelta(seconds=10),
                    interceptors=list(interceptors),
                )
            )
    return workers


@contextlib.asynccontextmanager
async def running_workers(
    settings: Settings, stages: tuple[str, ...] = STAGES
) -> AsyncIterator[None]:
    """Serve `stages` in this process for the duration of the block (tests, scripts)."""
    client = await connect(settings)
    async with contextlib.AsyncExitStack() as stack:
        for worker in build_workers(client, settings, stages):
            await stack.enter_async_context(worker)
        yield


async def run_worker(settings: Settings, stages: tuple[str, ...] = STAGES) -> None:
    """Serve `stages` until SIGINT/SIGTERM, then shut down gracefully."""
    unknown = set(stages) - set(STAGES)
    if unknown:
        raise ValueError(f"unknown queues {sorted(unknown)}; choose from {STAGES}")
    Storage(settings).ensure_bucket()
    obs = start_observability(settings)  # metrics_port 0: None
    client = await connect(settings, runtime=obs.runtime if obs else None)
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
        ready = os.environ.get("POLAR_WORKER_READY_FILE")
        if ready:
            Path(ready).write_text(str(os.getpid()))
        log.info("worker serving %s on %s", ",".join(stages), settings.temporal_address)
        try:
            await stop.wait()
        finally:
            if obs:
                obs.close()

"""What every stage pool's activities share: the worker's settings, its S3 and its runtimes.

The activities are one class per pool of the stage table (workflows/stages.py):
`InitActivities` (activities/init_activities.py), `RunActivities`
(activities/run_activities.py), `PostrunActivities` (activities/postrun_activities.py),
and `HostProbeActivities` below for the host's probe queue. activities/worker.py serves
each class on its pool's queues. Each activity heartbeats while it works, so a worker
that dies is noticed within the heartbeat timeout and the stage is retried elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio import activity

from activities.runtimes import Runtime, get_runtime
from activities.spec_store import TaskSpecActivities
from polar.contracts import RuntimeHandle, invalid_input
from polar.settings import WorkerSettings
from polar.storage import Storage


def worker_runtime(kind: str, settings: WorkerSettings) -> Runtime:
    """The runtime of `kind` as this worker's settings make it: named by the deployment's
    task queue (one engine finds any worker's container), labelled with this host."""
    deployment = f"{settings.temporal_address}/{settings.temporal_namespace}/{settings.task_queue}"
    return get_runtime(
        kind,
        Path(settings.data_dir),
        namespace=settings.task_queue,
        host_id=settings.host_id,
        deployment=deployment,
        settings=settings,
    )


class PoolActivities:
    """Activities bound to one worker's settings and S3 client; a subclass per pool."""

    def __init__(self, settings: WorkerSettings, storage: Storage) -> None:
        self.settings = settings
        self.storage = storage
        self.specs = TaskSpecActivities(storage)  # large TaskSpec fields by reference

    def _runtime(self, kind: str) -> Runtime:
        return worker_runtime(kind, self.settings)

    def _check_host(self, handle: RuntimeHandle, stage: str) -> None:
        """A stage that touches a runtime runs on the host holding it, or fails loudly."""
        if handle.host_id is not None and handle.host_id != self.settings.host_id:
            raise invalid_input(
                f"{stage}: the runtime of {handle.session_id} is on host {handle.host_id!r}, "
                f"not on this one ({self.settings.host_id!r})",
                "WrongHost",
            )

    def all(self) -> list[Callable[..., Any]]:
        """The pool's activity implementations (activities/worker.py serves them)."""
        raise NotImplementedError


class HostProbeActivities(PoolActivities):
    """The host's probe queue (`{queue}-host-{host_id}`): it answers while the host is up."""

    @activity.defn(name="host_alive")
    async def host_alive(self) -> str:
        """This host's id: answered from its probe queue, it shows the host is up."""
        return self.settings.host_id

    def all(self) -> list[Callable[..., Any]]:
        return [self.host_alive]

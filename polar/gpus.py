"""GPU sessions: which workers offer GPUs, and where a session asking for them may go.

A worker declares its host's GPUs (`POLAR_GPUS`, `POLAR_GPU_TYPES`: polar/settings/worker.py)
and then polls one more queue, `{queue}-gpu` (`gpu_queue`), under an identity that carries
the declaration (`GpuOffer.identity`): `{pid}@{host_id} polar-gpus={"host":..,"count":..,
"types":[..]}`. What the deployment offers is read from that queue's pollers with Temporal's
DescribeTaskQueue (`gpu_offers`), by `polar submit` / `PolarClient.submit`, which refuses a
task no poller can hold (`NoGpuWorkers`, naming why), and by the `place_gpu_session` stage,
which picks the host a GPU session's runtime is prepared on (workflows/placement.py): only
a worker that declares at least the GPUs asked, of one of the types asked, ever gets one.

Types match case-insensitively, whole or as one word of the declared name (`H100` matches a
worker's `NVIDIA H100 80GB HBM3`); no types asked: any GPU.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

__all__ = [
    "GpuHost",
    "GpuOffer",
    "GpuPlacement",
    "NoGpuWorkers",
    "fitting",
    "gpu_offers",
    "gpu_queue",
    "gpu_refusal",
    "type_matches",
]

_MARK = " polar-gpus="
STALE_POLLER_S = 180.0
"""A GPU queue poller not seen for this long is a worker gone (a live one polls again within
the server's long-poll timeout, about a minute)."""


def gpu_queue(task_queue: str) -> str:
    """The queue GPU workers of the deployment `task_queue` poll to declare their GPUs."""
    return f"{task_queue}-gpu"


class NoGpuWorkers(ValueError):
    """A task asks for GPUs no worker polling the deployment declares: refused at submit."""


class GpuPlacement(BaseModel):
    """What the `place_gpu_session` stage is asked: the session's GPUs, and hosts to avoid."""

    session_id: str
    gpus: int = Field(ge=1)
    gpu_types: list[str] = Field(default_factory=list)
    avoid_hosts: list[str] = Field(default_factory=list)


class GpuHost(BaseModel):
    """Where it goes: a host whose worker declares the GPUs, and that host's queue prefix."""

    host_id: str
    host_queue: str
    count: int
    types: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class GpuOffer:
    """One worker's declared GPUs: its host, how many, of which types."""

    host: str
    count: int
    types: tuple[str, ...] = ()

    def identity(self) -> str:
        """The worker identity on the GPU queue that carries this offer."""
        data = {"host": self.host, "count": self.count, "types": list(self.types)}
        return f"{os.getpid()}@{self.host}{_MARK}{json.dumps(data, separators=(',', ':'))}"

    @classmethod
    def parse(cls, identity: str) -> GpuOffer | None:
        """The offer an identity carries; None where it carries none (or a malformed one)."""
        _, mark, text = identity.partition(_MARK)
        if not mark:
            return None
        try:
            data = json.loads(text)
            offer = cls(str(data["host"]), int(data["count"]), tuple(map(str, data["types"])))
        except (ValueError, KeyError, TypeError):
            return None
        return offer if offer.count > 0 and offer.host else None


def type_matches(wanted: str, declared: str) -> bool:
    """Whether a GPU type asked for names a declared one (whole, or one word of it)."""
    want, have = wanted.strip().casefold(), declared.strip().casefold()
    return bool(want) and (want == have or want in re.split(r"[\s_/-]+", have))


def fitting(offers: Sequence[GpuOffer], count: int, types: Sequence[str]) -> list[GpuOffer]:
    """The offers with at least `count` GPUs of one of `types` (any, when none is given)."""
    return [
        o
        for o in offers
        if o.count >= count
        and (not types or any(type_matches(t, d) for t in types for d in o.types))
    ]


def gpu_refusal(offers: Sequence[GpuOffer], count: int, types: Sequence[str], queue: str) -> str:
    """Why no offer fits: what was asked, and what the deployment's GPU workers declare."""
    asked = f"{count} GPU{'s' if count != 1 else ''}" + (
        f" of type {' or '.join(types)}" if types else ""
    )
    if not offers:
        return (
            f"the task asks for {asked}, and no worker of the deployment (task queue "
            f"{queue!r}) declares GPUs: start a worker with POLAR_GPUS (and POLAR_GPU_TYPES) "
            "on a host that has them (docs/runtimes.md, GPUs)"
        )
    declared = "; ".join(
        f"{o.host}: {o.count}" + (f" × {', '.join(o.types)}" if o.types else "") for o in offers
    )
    return (
        f"the task asks for {asked}, and no worker of the deployment (task queue {queue!r}) "
        f"declares that many of that type (declared: {declared})"
    )


async def gpu_offers(client: Client, namespace: str, task_queue: str) -> list[GpuOffer]:
    """The GPUs the workers polling the deployment's GPU queue declare (one offer per host:
    its latest poller's; pollers not seen for STALE_POLLER_S left out)."""
    request = DescribeTaskQueueRequest(
        namespace=namespace,
        task_queue=TaskQueue(name=gpu_queue(task_queue)),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    )
    answer = await client.workflow_service.describe_task_queue(request)
    now = time.time()
    fresh = [  # the server lists a poller for minutes after its worker stopped
        p for p in answer.pollers if now - p.last_access_time.ToSeconds() <= STALE_POLLER_S
    ]
    latest = sorted(fresh, key=lambda p: p.last_access_time.ToNanoseconds())
    offers = {o.host: o for p in latest if (o := GpuOffer.parse(p.identity)) is not None}
    return sorted(offers.values(), key=lambda o: o.host)

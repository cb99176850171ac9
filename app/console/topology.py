"""The topology page's data: gateways, their replicas and pools, workers by queue and host.

Gateways: each one's admin listener (`/health`: upstreams, replicas with in-flight calls and
calls served, pools; `/metrics`: in flight, held, paused, calls answered), the URLs from
`console_gateways`, else the gateway settings every process reads (POLAR_ADMIN_HOST/PORT).
Workers: Temporal's description of each of Polar's task queues (its pollers), the shared
ones (`{queue}`, `-init`, `-run`, `-postrun`) and each host's (`{queue}-host-{host}…`), the
hosts taken from the shared queues' pollers (a worker's identity is `pid@hostname`, and its
host id defaults to its hostname). Nothing here is a secret: URLs lose any user:password.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

from polar.settings import ConsoleSettings, ServiceSettings
from workflows.queues import HostQueues, Queues

GATEWAY_TIMEOUT_S = 2.0
GAUGES = {
    "polar_gateway_in_flight": "in_flight",
    "polar_gateway_held": "held",
    "polar_gateway_paused": "paused",
}


def without_credentials(url: str) -> str:
    """`url` without a `user:password@` part (an upstream may carry one)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "[unparsable URL]"
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass
class Replica:
    """One upstream replica as a gateway routes to it."""

    url: str
    up: bool
    in_flight: int
    sessions: int
    served: int
    failures: int
    share: float | None = None
    """Its part of the calls the gateway's replicas of this upstream served."""


@dataclass
class Pool:
    """A named backend pool of a gateway."""

    name: str
    models: list[str]
    role: str
    replicas: list[Replica]


@dataclass
class Gateway:
    """One gateway, from its admin listener; `error` when it did not answer."""

    admin_url: str
    error: str | None = None
    gateway_id: str = ""
    upstream_kind: str = ""
    routing: str = ""
    context_window: int | None = None
    replicas: list[Replica] = field(default_factory=list)
    pools: list[Pool] = field(default_factory=list)
    gauges: dict[str, float] = field(default_factory=dict)
    calls_answered: float = 0.0


@dataclass
class Poller:
    identity: str
    last_seen: datetime | None
    rate: float


@dataclass
class Queue:
    """One of Polar's task queues and its pollers (the workers serving it)."""

    name: str
    pool: str
    host: str | None
    kind: str
    pollers: list[Poller] = field(default_factory=list)
    error: str | None = None


@dataclass
class Topology:
    gateways: list[Gateway]
    queues: list[Queue]
    hosts: list[str]
    services: list[tuple[str, str]]


def replicas_of(snapshot: Any) -> list[Replica]:
    """A router snapshot's replicas, each with its share of the calls served."""
    found = [
        Replica(
            url=without_credentials(str(r.get("url", ""))),
            up=bool(r.get("up")),
            in_flight=int(r.get("inflight") or 0),
            sessions=int(r.get("sessions") or 0),
            served=int(r.get("served") or 0),
            failures=int(r.get("failures") or 0),
        )
        for r in (snapshot if isinstance(snapshot, list) else [])
        if isinstance(r, dict)
    ]
    total = sum(r.served for r in found)
    for r in found:
        r.share = r.served / total if total else None
    return found


def gateway_from(admin_url: str, health: dict[str, Any], metrics: str) -> Gateway:
    """A gateway's view from its /health answer and its /metrics text."""
    gateway = Gateway(
        admin_url=without_credentials(admin_url),
        gateway_id=str(health.get("gateway_id", "")),
        upstream_kind=str(health.get("upstream_kind", "")),
        routing=str(health.get("upstream_routing", "")),
        context_window=health.get("context_window"),
        replicas=replicas_of(health.get("replicas")),
    )
    pools = health.get("pools")
    for name, pool in (pools if isinstance(pools, dict) else {}).items():
        role = "policy" if pool.get("policy") else "side"
        if pool.get("harness"):
            role += ", harness may call"
        models = [str(m) for m in pool.get("models") or []]
        gateway.pools.append(Pool(str(name), models, role, replicas_of(pool.get("replicas"))))
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name in GAUGES:
                gateway.gauges[GAUGES[sample.name]] = sample.value
            elif sample.name == "polar_gateway_calls_total":
                gateway.calls_answered += sample.value
    return gateway


async def read_gateway(http: httpx.AsyncClient, admin_url: str) -> Gateway:
    """One gateway's /health and /metrics (no token needed: they are not /admin)."""
    base = admin_url.rstrip("/")
    try:
        health, metrics = await asyncio.gather(
            http.get(f"{base}/health"), http.get(f"{base}/metrics")
        )
        health.raise_for_status()
        metrics.raise_for_status()
        return gateway_from(base, health.json(), metrics.text)
    except (httpx.HTTPError, ValueError) as exc:
        return Gateway(admin_url=without_credentials(base), error=type(exc).__name__)


def gateway_admin_urls(settings: ConsoleSettings) -> list[str]:
    """The admin listeners to read: `console_gateways`, else the gateway settings'."""
    named = getattr(settings, "console_gateways", None)
    if named:
        return [u.strip() for u in str(named).split(",") if u.strip()]
    if isinstance(settings, ServiceSettings):
        return [settings.admin_base_url]
    try:
        return [ServiceSettings().admin_base_url]  # POLAR_ADMIN_HOST / POLAR_ADMIN_PORT
    except ValidationError:
        return []


async def describe_queue(client: Client, namespace: str, queue: Queue) -> Queue:
    """`queue` with its pollers (workers polling it recently)."""
    kind = (
        TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
        if queue.kind == "workflow"
        else TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
    )
    request = DescribeTaskQueueRequest(
        namespace=namespace, task_queue=TaskQueue(name=queue.name), task_queue_type=kind
    )
    try:
        answer = await client.workflow_service.describe_task_queue(request)
    except RPCError as exc:
        queue.error = exc.message
        return queue
    queue.pollers = [
        Poller(
            p.identity,
            p.last_access_time.ToDatetime() if p.HasField("last_access_time") else None,
            p.rate_per_second,
        )
        for p in answer.pollers
    ]
    return queue


def host_of(identity: str) -> str:
    """The hostname of a worker identity (`pid@hostname`)."""
    return identity.split("@", 1)[1] if "@" in identity else identity


async def worker_queues(client: Client, settings: ConsoleSettings) -> tuple[list[Queue], list[str]]:
    """Polar's shared queues and each host's, described; the hosts found."""
    ns = settings.temporal_namespace
    shared = [
        Queue(name, pool, None, "workflow" if pool == "workflow" else "activity")
        for pool, name in Queues.for_workflow_queue(settings.task_queue).by_pool().items()
    ]
    shared = list(await asyncio.gather(*(describe_queue(client, ns, q) for q in shared)))
    hosts = sorted({host_of(p.identity) for q in shared if q.kind == "activity" for p in q.pollers})
    per_host = []
    for host in hosts:
        queues = HostQueues.for_host(settings.task_queue, host)
        per_host.append(Queue(queues.probe, "probe", host, "activity"))
        per_host += [Queue(n, pool, host, "activity") for pool, n in queues.by_pool().items()]
    per_host = list(await asyncio.gather(*(describe_queue(client, ns, q) for q in per_host)))
    return shared + per_host, hosts


def services(settings: ConsoleSettings, gateways: list[Gateway]) -> list[tuple[str, str]]:
    """The stack's services and where they are (addresses only, never a credential)."""
    endpoint = settings.s3_endpoint or "AWS S3"
    found = [
        ("Temporal", f"{settings.temporal_address} · namespace {settings.temporal_namespace}"),
        ("Temporal Web UI", settings.temporal_ui_base_url),
        ("S3", f"{without_credentials(str(endpoint))} · bucket {settings.s3_bucket}"),
        ("console", settings.console_base_url),
    ]
    found += [("gateway", g.admin_url + (f" · {g.error}" if g.error else "")) for g in gateways]
    return found


async def topology(client: Client, settings: ConsoleSettings) -> Topology:
    """The whole page: gateways and workers read at once."""
    async with httpx.AsyncClient(timeout=GATEWAY_TIMEOUT_S) as http:
        gateways, (queues, hosts) = await asyncio.gather(
            asyncio.gather(*(read_gateway(http, u) for u in gateway_admin_urls(settings))),
            worker_queues(client, settings),
        )
    return Topology(list(gateways), queues, hosts, services(settings, list(gateways)))

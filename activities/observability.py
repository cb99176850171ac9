"""Worker observability: stage metrics, Temporal SDK metrics on one port, log context.

With `metrics_port` set, a worker serves `GET /metrics` on
`metrics_host:metrics_port` with
* `polar_stage_seconds{stage,status}`: how long each stage activity ran
  (stage = activity name in the stage table, workflows/stages.py, every one
  present from the start; status = ok / error / cancelled), and
  `polar_stage_in_progress{stage}`;
* `polar_queue_backlog{stage,queue}` and `polar_queue_backlog_age_seconds`:
  the depth of each stage queue, read from Temporal every few seconds (a
  backlog on `-run` is the paper's READY buffer of prepared runtimes);
* Temporal's own SDK metrics (`temporal_*`: task slots, poll and
  schedule-to-start latencies, activity/workflow task counts), which the
  Temporal core exports through `Runtime(telemetry=TelemetryConfig(metrics=
  PrometheusConfig(...)))` on an internal loopback port and which are appended
  to each scrape, so one scrape target covers both;
* among them, the sessions this worker's Session workflows ended, by outcome
  class (polar/outcomes.py: `ok`, `policy_failure`, `timeout`, `infra_error`,
  `task_error`) and infra reason (`polar_session_outcomes`, the workflow's
  metric meter: workflows/session.py).

The activity interceptor also puts the session and task ids of the running
activity into the log context (`polar.logs`), so every log line of a stage is
JSON with `session_id` and `task_id`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Gauge,
    Histogram,
    generate_latest,
)
from temporalio import activity
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from activities.heartbeat import mark_activity_start
from polar.logs import log_context
from polar.settings import WorkerSettings
from workflows.queues import HostQueues, Queues
from workflows.stages import STAGE_ACTIVITIES

log = logging.getLogger("polar.worker")
STAGE_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)


class WorkerMetrics:
    """Stage metrics of one worker process, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.stage_seconds = Histogram(
            "polar_stage_seconds",
            "Duration of stage activities (one observation per attempt)",
            ["stage", "status"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.in_progress = Gauge(
            "polar_stage_in_progress",
            "Stage activities running on this worker",
            ["stage"],
            registry=self.registry,
        )
        self.queue_backlog = Gauge(
            "polar_queue_backlog",
            "Tasks waiting in each Polar task queue (Temporal's approximate backlog)",
            ["stage", "queue"],
            registry=self.registry,
        )
        self.queue_backlog_age = Gauge(
            "polar_queue_backlog_age_seconds",
            "How long the oldest waiting task of each Polar task queue has waited",
            ["stage", "queue"],
            registry=self.registry,
        )
        for name in STAGE_ACTIVITIES:  # every stage of the table is a series from the start
            self.in_progress.labels(name)
            for status in ("ok", "error", "cancelled"):
                self.stage_seconds.labels(name, status)

    async def refresh_queue_depths(
        self, client: Client, settings: WorkerSettings
    ) -> dict[str, int]:
        """Read every stage queue's backlog from Temporal into the gauges (the shared queues and
        this worker host's own); backlog by stage, both summed."""
        shared = Queues.for_workflow_queue(settings.task_queue).by_pool()
        host = HostQueues.for_host(settings.task_queue, settings.host_id).by_pool()
        pairs = [*shared.items(), *host.items()]
        depths: dict[str, int] = {}
        for stage, queue in pairs:
            kind = (
                TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
                if stage == "workflow"
                else TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
            )
            answer = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=settings.temporal_namespace,
                    task_queue=TaskQueue(name=queue),
                    task_queue_type=kind,
                    report_stats=True,
                )
            )
            backlog = int(answer.stats.approximate_backlog_count)
            depths[stage] = depths.get(stage, 0) + backlog
            age = answer.stats.approximate_backlog_age
            self.queue_backlog.labels(stage, queue).set(backlog)
            self.queue_backlog_age.labels(stage, queue).set(age.seconds + age.nanos / 1e9)
        return depths

    async def poll_queue_depths(
        self, client: Client, settings: WorkerSettings, every_s: float = 5.0
    ) -> None:
        """Keep the queue gauges fresh until cancelled; a failed read is logged, not fatal."""
        while True:
            try:
                await self.refresh_queue_depths(client, settings)
            except Exception as exc:  # noqa: BLE001 - metrics must never stop a worker
                log.warning("queue depths unavailable: %s", exc)
            await asyncio.sleep(every_s)


def _ids(arg: Any) -> dict[str, str | None]:
    """session_id / task_id of an activity's input, whichever request model it is."""
    session_id = getattr(arg, "session_id", None)
    key = getattr(arg, "traces_key", None)
    if session_id is None and isinstance(key, str) and key.startswith("sessions/"):
        session_id = key.split("/")[1]
    return {"session_id": session_id, "task_id": getattr(arg, "task_id", None)}


class _StageInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, metrics: WorkerMetrics | None) -> None:
        super().__init__(next)
        self.metrics = metrics

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        stage = info.activity_type
        mark_activity_start()
        ids = _ids(input.args[0] if input.args else None)
        with log_context(**ids, stage=stage, attempt=info.attempt):
            if self.metrics:
                self.metrics.in_progress.labels(stage).inc()
            started, status = time.monotonic(), "error"
            try:
                result = await super().execute_activity(input)
                status = "ok"
                return result
            except asyncio.CancelledError:
                status = "cancelled"
                raise
            finally:
                elapsed = time.monotonic() - started
                if self.metrics:
                    self.metrics.in_progress.labels(stage).dec()
                    self.metrics.stage_seconds.labels(stage, status).observe(elapsed)
                log.info(
                    "stage %s %s in %.2fs",
                    stage,
                    status,
                    elapsed,
                    extra={"status": status, "duration_s": round(elapsed, 3)},
                )


class StageInterceptor(Interceptor):
    """Times every activity and gives its log lines the session's ids."""

    def __init__(self, metrics: WorkerMetrics | None = None) -> None:
        self.metrics = metrics

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _StageInbound(next, self.metrics)


def _free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server(registry: CollectorRegistry, temporal_url: str | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = generate_latest(registry)
            if temporal_url:
                try:
                    with urllib.request.urlopen(temporal_url, timeout=5) as answer:
                        body += answer.read()
                except OSError as exc:  # Temporal's exporter down: still serve ours
                    log.warning("temporal metrics unavailable: %s", exc)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    return Handler


@dataclass
class Observability:
    """What a worker with metrics on runs with: its Temporal runtime and metrics server."""

    metrics: WorkerMetrics
    runtime: Runtime
    server: ThreadingHTTPServer
    url: str

    @property
    def interceptor(self) -> StageInterceptor:
        return StageInterceptor(self.metrics)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.server.shutdown()
            self.server.server_close()


def start_observability(settings: WorkerSettings) -> Observability | None:
    """Start the metrics endpoint of `settings.metrics_port` (None when it is 0)."""
    if not settings.metrics_port:
        return None
    metrics = WorkerMetrics()
    temporal_bind = f"127.0.0.1:{_free_loopback_port()}"
    runtime = Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(bind_address=temporal_bind, durations_as_seconds=True)
        )
    )
    handler = _server(metrics.registry, f"http://{temporal_bind}/metrics")
    server = ThreadingHTTPServer((settings.metrics_host, settings.metrics_port), handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="polar-metrics").start()
    url = f"http://{settings.metrics_host}:{settings.metrics_port}/metrics"
    log.info("worker metrics on %s", url)
    return Observability(metrics, runtime, server, url)

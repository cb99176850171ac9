"""Helpers for the scale-out and fault tests: an endless fake backend, nodes, tasks, history.

A *node* is what one host of a deployment runs: its own data dir, optionally a
gateway process and a `polar worker` process, sharing the suite's one Temporal
and one S3 with every other node. Processes are real (`python -m app.cli ...`)
so a test can SIGKILL them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from app.cli.demo import demo_task
from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.settings import Settings
from polar.tasks.spec import TaskSpec
from polar.temporal_client import connect
from tests.support.ports import free_port

from .scripted_backend import render_answer, serve_app, text

AGENT_DIR = Path(__file__).resolve().parent / "fault_agent"


@dataclass
class EndlessBackend:
    """A vLLM-shaped backend that always answers a short text after `delay_s`."""

    url: str = ""
    delay_s: float = 0.0
    calls: int = 0
    in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def endless_backend(delay_s: float = 0.0) -> Iterator[EndlessBackend]:
    import asyncio

    handle = EndlessBackend(delay_s=delay_s)
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        with handle._lock:
            handle.calls += 1
            handle.in_flight += 1
        try:
            if handle.delay_s:
                await asyncio.sleep(handle.delay_s)
            return JSONResponse(render_answer(body, text(f"answer {handle.calls}")))
        finally:
            with handle._lock:
                handle.in_flight -= 1

    with serve_app(app) as base:
        handle.url = f"{base}/v1"
        yield handle


class Node:
    """One host's processes (gateway, worker) with its own data dir and gateway port."""

    def __init__(self, base: Settings, data_dir: Path, name: str, **overrides: Any) -> None:
        self.name = name
        data_dir.mkdir(parents=True, exist_ok=True)
        update = {
            "data_dir": data_dir,
            "gateway_port": free_port(),
            "admin_port": free_port(),
            "log_format": "text",
        }
        self.settings = base.model_copy(update=update | overrides)
        self.stack = DevStack(self.settings, with_model=False, workers=0, die_with_parent=True)

    @property
    def gateway_url(self) -> str:
        return self.settings.gateway_base_url

    @property
    def admin_url(self) -> str:
        """The gateway's admin listener (/metrics, /health, /admin)."""
        return self.settings.admin_base_url

    def start_gateway(self) -> None:
        self.stack.start(self.stack.gateway(), log=lambda _: None)

    def start_worker(self, queues: str = "workflow,init,run,postrun", **caps: int) -> None:
        service = self.stack.worker()
        argv = [*service.argv, "--queues", queues]
        for key, value in caps.items():  # max_run=2 -> --max-run 2
            argv += [f"--{key.replace('_', '-')}", str(value)]
        self.stack.start(replace(service, argv=argv), log=lambda _: None)

    def pid(self, part: str) -> int | None:
        return self.stack.pid(part)

    def kill(self, part: str) -> int:
        """SIGKILL `part` (a crash) and wait until it is gone; its pid."""
        return self.stack.kill(part)

    def stop(self, part: str) -> None:
        self.stack.stop(part, quiet=True)

    def close(self) -> None:
        for part in ("worker", "gateway"):
            self.stack.stop(part, quiet=True)

    def log_tail(self, part: str, n: int = 3000) -> str:
        path = self.stack.log_path(part)
        return path.read_text(errors="replace")[-n:] if path.exists() else ""


def fault_task(
    task_id: str,
    *,
    sessions: int = 1,
    turns: int = 4,
    pause_s: float = 0.0,
    log: Path | None = None,
    heartbeat_s: float = 5,
    prepare: str | None = None,
    evaluator: str = "test -s answer.txt",
) -> TaskSpec:
    """The demo task shape with the fault agent, short heartbeats and optional slow stages."""
    spec = demo_task(sessions=sessions).model_copy(deep=True)
    data = spec.model_dump(mode="json")
    data["task_id"] = task_id
    data["source"]["path"] = str(AGENT_DIR)
    env = {"FAULT_TURNS": str(turns), "FAULT_PAUSE_S": str(pause_s)}
    if log is not None:
        env["FAULT_LOG"] = str(log)
        log.touch()
        log.chmod(0o666)  # the harness runs as the local runtime's unprivileged user
    data["harness"]["env"] = env
    data["evaluator"] = {"kind": "command", "command": evaluator}
    data["timeouts"]["heartbeat_s"] = heartbeat_s
    data["timeouts"]["harness_s"] = 240
    if prepare:
        data["runtime"]["prepare"] = [{"type": "run", "command": prepare, "timeout_s": 120}]
    return TaskSpec.model_validate(data)


def answered(log: Path) -> list[dict[str, Any]]:
    """The fault agent's log: one entry per call it saw answered."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class ActivityRun:
    activity: str
    attempt: int
    identity: str


async def activity_runs(client: Client, workflow_id: str) -> list[ActivityRun]:
    """Every started activity attempt of a workflow: its type, attempt and worker identity.

    ActivityTaskStarted carries the attempt and the identity of the worker that
    picked it up; its type is on the ActivityTaskScheduled event it points at.
    """
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    scheduled: dict[int, str] = {}
    runs = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            runs.append(
                ActivityRun(scheduled[attrs.scheduled_event_id], attrs.attempt, attrs.identity)
            )
    return runs


@asynccontextmanager
async def single_node(
    settings: Settings, tmp_path: Path, task_queue: str, *, delay_s: float = 0.0
) -> AsyncIterator[tuple[EndlessBackend, Node, PolarClient]]:
    """A fake backend and one node (a gateway and a worker process) on its own task queue."""
    with endless_backend(delay_s=delay_s) as backend:
        base = settings.model_copy(update={"task_queue": task_queue, "upstream_urls": backend.url})
        node = Node(base, tmp_path / "node", "node")
        try:
            node.start_gateway()
            node.start_worker()
            yield backend, node, PolarClient(await connect(base), base)
        finally:
            node.close()

"""The harness CLIs as Temporal sessions: an agent backend and a gateway in threads, and
a worker on its own task queue whose harnesses call that gateway.

The `harness_stack` fixture (tests/conftest.py) runs one per test module; tests
point the backend at their task with `backend.assign(RepoTask)` (calls that
arrive before it wait), submit sessions with `stack.polar`, and find each
runtime's host-side dir under `stack.runtimes`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar.client.sdk import PolarClient
from polar.settings import Settings
from polar.storage import Storage
from proxy.app import create_app
from tests.support.agent_backend import AgentBackend, RepoTask, agent_backend_app
from tests.support.polling import wait_for
from tests.support.scripted_backend import serve_app


class SessionBackend(AgentBackend):
    """An agent backend whose task is set once the session's workspace is known.

    The workspace path (the session id is in it) exists only after submission;
    calls wait until `assign` names it, so the plan reads and edits the right file.
    """

    def __init__(self, model_dir: Path) -> None:
        placeholder = RepoTask(Path("/nonexistent"), "calc.py", "", "", "true")
        super().__init__(placeholder, model_dir)
        self.ready = threading.Event()

    def reset(self) -> None:
        self.ready.clear()
        self.calls = []

    def assign(self, task: RepoTask) -> None:
        self.task = task
        self.ready.set()

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not self.ready.wait(15):
            return 503, {"error": {"message": "no task assigned", "code": 503}}
        return super().answer(body)


@dataclass
class HarnessStack:
    polar: PolarClient
    backend: SessionBackend
    runtimes: Path


@contextlib.asynccontextmanager
async def running_harness_stack(base: Settings, model_dir: Path) -> AsyncIterator[HarnessStack]:
    """Agent backend and gateway in threads, a worker on its own queue pointed at that gateway."""
    from activities.worker import build_workers
    from polar.temporal_client import connect

    backend = SessionBackend(model_dir)
    with contextlib.ExitStack() as threads:
        backend.url = f"{threads.enter_context(serve_app(agent_backend_app(backend)))}/v1"
        gw_settings = base.model_copy(update={"upstream_urls": backend.url})
        gateway = threads.enter_context(serve_app(create_app(gw_settings, Storage(gw_settings))))
        settings = base.model_copy(
            update={
                "task_queue": f"polar-harness-{uuid.uuid4().hex[:8]}",
                "gateway_url": gateway,
                "upstream_urls": backend.url,
            }
        )
        client = await connect(settings)
        async with contextlib.AsyncExitStack() as workers:
            for w in build_workers(client, settings):
                await workers.enter_async_context(w)
            yield HarnessStack(
                PolarClient(client, settings), backend, Path(settings.data_dir) / "runtimes"
            )
            backend.ready.set()  # a call still held for an unassigned task ends now


async def assign_when_prepared(stack: HarnessStack, task_id: str, task: RepoTask) -> str:
    """Wait for the session's (local) workspace to appear; point the backend's plan at it."""
    found: list[Path] = []

    def prepared() -> bool:
        found[:] = sorted(stack.runtimes.resolve().glob(f"{task_id}-*"))
        return bool(found)

    await wait_for(prepared, 120, f"a runtime for {task_id}", every_s=0.05)
    stack.backend.assign(dataclasses.replace(task, workspace=found[0] / "workspace"))
    return found[0].name

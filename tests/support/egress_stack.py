"""An "internet" on loopback and a worker whose deployment turns egress on, for the tests of
the egress proxy (tests/system/test_egress.py, test_harbor_egress.py): the fixtures
`internet` (its port) and `egress_polar` (a client of that worker), module-scoped, given to
the system lane by tests/system/conftest.py."""

from __future__ import annotations

import contextlib
import http.server
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.settings import Settings

__all__ = ["LoopbackInternet", "egress_polar", "egress_worker", "internet", "loopback_internet"]


class LoopbackInternet(http.server.BaseHTTPRequestHandler):
    """Answers every GET with `internet says hi to {path}`."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = f"internet says hi to {self.path}\n".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def loopback_internet() -> Iterator[int]:
    """A LoopbackInternet server on 127.0.0.1 in a thread while the block runs: its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LoopbackInternet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@contextlib.asynccontextmanager
async def egress_worker(settings: Settings, internet: int, name: str) -> AsyncIterator[PolarClient]:
    """A worker on a queue of its own (`polar-{name}-…`) whose deployment turns egress on,
    exempting the internet's one loopback port from the blocked networks (the default blocks
    loopback), while the block runs: a client of that queue."""
    from activities.worker import running_workers

    own = settings.model_copy(
        update={
            "task_queue": f"polar-{name}-{uuid.uuid4().hex[:8]}",
            "egress": "proxy",
            "egress_exempt": [f"127.0.0.1:{internet}"],
        }
    )
    async with running_workers(own):
        yield await PolarClient.connect(own)


@pytest.fixture(scope="module")
def internet() -> Iterator[int]:
    """The 'internet' of a test module (a loopback server): its port."""
    with loopback_internet() as port:
        yield port


@pytest.fixture(scope="module")
async def egress_polar(
    devstack: DevStack, docker_image: str, internet: int
) -> AsyncIterator[PolarClient]:
    """A worker on its own queue with egress on, the internet's port exempt: its client."""
    async with egress_worker(devstack.settings, internet, "egress") as polar:
        yield polar

"""Run the gateway (what `polar gateway` calls): the model port and the admin port.

Two uvicorn servers in one event loop over one app state: harnesses reach only
the model port (`gateway_host:gateway_port`); admin, metrics, health and docs
answer on `admin_host:admin_port` (`proxy.admin`). The loop is uvloop and the
HTTP parser httptools when they are installed (the `server` extra's dependencies),
else asyncio and h11.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Coroutine
from typing import Any

import uvicorn
from fastapi import FastAPI

from polar.credentials import refuse_weak_secrets
from polar.logs import configure_logging
from polar.settings import GatewaySettings
from proxy.app import create_app


def http_impl() -> str:
    """uvicorn's HTTP protocol: httptools (C parser) if importable, else h11."""
    return "httptools" if importlib.util.find_spec("httptools") else "h11"


def loop_impl() -> str:
    """The event loop the gateway runs on: uvloop if importable, else asyncio."""
    return "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"


def _server(app: FastAPI, host: str, port: int) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        log_config=None,  # uvicorn's loggers go through the root handler (JSON lines)
        host=host,
        port=port,
        log_level="info",
        access_log=False,
        timeout_keep_alive=75,
        http=http_impl(),
        loop="none",  # the loop is ours (`run`), shared by both servers
    )
    return uvicorn.Server(config)


async def serve_both(settings: GatewaySettings) -> None:
    """Serve the model and admin listeners until either stops (a signal stops both)."""
    app = create_app(settings)
    servers = [
        _server(app, settings.gateway_host, settings.gateway_port),
        _server(app.state.admin_app, settings.admin_host, settings.admin_port),
    ]
    tasks = [asyncio.create_task(server.serve()) for server in servers]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for server in servers:  # each server captures signals itself: stop the other one too
        server.should_exit = True
    await asyncio.gather(*tasks)


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` on uvloop if it is installed, else on asyncio's own loop."""
    if loop_impl() == "uvloop":
        import uvloop

        uvloop.run(main)
    else:
        asyncio.run(main)


def serve(settings: GatewaySettings) -> None:
    """Serve the gateway until interrupted; refuses to start with weak secrets."""
    refuse_weak_secrets(settings, "gateway")
    configure_logging(settings.log_format)
    run(serve_both(settings))

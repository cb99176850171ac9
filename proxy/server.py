"""Run the gateway (what `polar gateway` calls): the model port and the admin port.

Two uvicorn servers in one event loop over one app state: harnesses reach only
the model port (`gateway_host:gateway_port`); admin, metrics, health and docs
answer on `admin_host:admin_port` (`proxy.admin`).
"""

from __future__ import annotations

import asyncio

import uvicorn
from fastapi import FastAPI

from polar.credentials import refuse_weak_secrets
from polar.logs import configure_logging
from polar.settings import Settings
from proxy.app import create_app


def _server(app: FastAPI, host: str, port: int) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        log_config=None,  # uvicorn's loggers go through the root handler (JSON lines)
        host=host,
        port=port,
        log_level="info",
        access_log=False,
        timeout_keep_alive=75,
    )
    return uvicorn.Server(config)


async def serve_both(settings: Settings) -> None:
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


def serve(settings: Settings) -> None:
    """Serve the gateway until interrupted; refuses to start with weak secrets."""
    refuse_weak_secrets(settings, "gateway")
    configure_logging(settings.log_format)
    asyncio.run(serve_both(settings))

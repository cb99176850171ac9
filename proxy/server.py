"""Run the gateway as a uvicorn server (what `polar gateway` calls)."""

from __future__ import annotations

import uvicorn

from polar.settings import Settings
from proxy.app import create_app


def serve(settings: Settings) -> None:
    """Serve the gateway on `settings.gateway_host:gateway_port` until interrupted."""
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.gateway_host,
        port=settings.gateway_port,
        log_level="info",
        access_log=False,
        timeout_keep_alive=75,
    )

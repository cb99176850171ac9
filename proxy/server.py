"""Run the gateway as a uvicorn server (what `polar gateway` calls)."""

from __future__ import annotations

import uvicorn

from polar.credentials import refuse_weak_secrets
from polar.logs import configure_logging
from polar.settings import Settings
from proxy.app import create_app


def serve(settings: Settings) -> None:
    """Serve the gateway on `settings.gateway_host:gateway_port` until interrupted."""
    refuse_weak_secrets(settings, "gateway")
    configure_logging(settings.log_format)
    app = create_app(settings)
    uvicorn.run(
        app,
        log_config=None,  # uvicorn's loggers go through the root handler (JSON lines)
        host=settings.gateway_host,
        port=settings.gateway_port,
        log_level="info",
        access_log=False,
        timeout_keep_alive=75,
    )

"""`polar console`: the console (a read-only web app over Temporal and S3) in the foreground."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from app.cli.extras import require_server
from app.cli.main import console


def console_command(
    host: Annotated[str | None, typer.Option(help="where it listens [POLAR_CONSOLE_HOST]")] = None,
    port: Annotated[int | None, typer.Option(help="its port [POLAR_CONSOLE_PORT]")] = None,
) -> None:
    """Serve the console: tasks, sessions, model calls, traces and grades, read-only."""
    require_server("console")
    import uvicorn

    from app.console import create_app
    from polar.logs import configure_logging
    from polar.settings import ConsoleSettings, get_settings

    for name, value in (("POLAR_CONSOLE_HOST", host), ("POLAR_CONSOLE_PORT", port)):
        if value is not None:
            os.environ[name] = str(value)
    get_settings.cache_clear()
    settings = get_settings(ConsoleSettings)
    configure_logging(settings.log_format)
    console.print(f"Polar console: {settings.console_base_url}")
    uvicorn.run(
        create_app(settings),
        host=settings.console_host,
        port=settings.console_port,
        log_level="warning",
        server_header=False,
    )

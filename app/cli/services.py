"""`polar gateway` and `polar worker`: Polar's long-running processes, in the foreground."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Annotated

import typer

from app.cli.extras import require_server
from app.cli.main import console


@contextlib.contextmanager
def refused_cleanly() -> Iterator[None]:
    """A process that refuses to start (weak secrets) says why and exits 2, no traceback."""
    from polar.credentials import WeakSecret

    try:
        yield
    except WeakSecret as exc:
        console.print(f"[red]{exc}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None


def gateway() -> None:
    """Run the gateway proxy in the foreground."""
    require_server("gateway")
    from polar.settings import GatewaySettings, get_settings
    from proxy.server import serve

    with refused_cleanly():
        serve(get_settings(GatewaySettings))


def worker(
    queues: Annotated[str, typer.Option(help="workflow,init,run,postrun or a subset")] = (
        "workflow,init,run,postrun"
    ),
    max_init: Annotated[int | None, typer.Option()] = None,
    max_run: Annotated[int | None, typer.Option()] = None,
    max_postrun: Annotated[int | None, typer.Option()] = None,
) -> None:
    """Run a worker serving the chosen queues in the foreground."""
    require_server("worker")
    from activities.worker import run_worker
    from polar.logs import configure_logging
    from polar.settings import WorkerSettings, get_settings

    caps = {"max_init": max_init, "max_run": max_run, "max_postrun": max_postrun}
    caps = {k: v for k, v in caps.items() if v is not None}
    settings = get_settings(WorkerSettings).model_copy(update=caps)
    configure_logging(settings.log_format)
    with refused_cleanly():
        asyncio.run(run_worker(settings, tuple(q.strip() for q in queues.split(",") if q.strip())))

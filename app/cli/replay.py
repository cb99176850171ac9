"""`polar replay`: a workflow history replayed against today's code."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from app.cli.main import console


def replay(
    target: Annotated[str, typer.Argument(help="a workflow id or a saved history .json")],
    save: Annotated[Path | None, typer.Option(help="also save the fetched history here")] = None,
) -> None:
    """Replay a workflow history against today's code and explain any non-determinism."""
    from polar.settings import ClientSettings, get_settings
    from workflows import replay as rp

    async def go() -> bool:
        path = Path(target)
        if path.suffix == ".json" and path.exists():
            history = rp.load_history(path)
        else:
            from polar.temporal_client import connect

            history = await rp.fetch_history(await connect(get_settings(ClientSettings)), target)
        if save:
            rp.save_history(history, save)
        report = await rp.replay(history)
        colour = "green" if report.ok else "red"
        console.print(
            f"[{colour}]{report.workflow_type} {report.workflow_id} "
            f"({report.events} events): {report.explanation}[/{colour}]"
        )
        return report.ok

    if not asyncio.run(go()):
        raise typer.Exit(1)

"""`polar export`: a task's traces written in the layouts trainers read."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from app.cli.extras import require_extra
from app.cli.main import console


def export(
    out: Annotated[Path, typer.Option(help="output directory")],
    workflow_id: Annotated[str | None, typer.Argument(help="the task's workflow id")] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="jsonl | hf | sft | verl | trl | slime | all, or several: jsonl,verl"
        ),
    ] = "all",
    min_reward: Annotated[float, typer.Option(help="SFT view: least session reward")] = 1.0,
    traces: Annotated[
        list[str] | None,
        typer.Option(help="offline: a traces JSONL file or S3 key, instead of a workflow id"),
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="seconds to wait for the task")] = None,
) -> None:
    """Write a task's traces for trainers: JSONL, a Hugging Face dataset, an SFT view, and
    verl, TRL and slime layouts (polar/client/export.py; each layout beside its bridge in
    polar/trainers/)."""
    from polar.client import export as ex
    from polar.settings import StorageSettings, get_settings

    try:
        formats = ex.expand_formats([fmt])
    except ValueError as exc:
        names = [f.value for f in ex.ExportFormat]
        console.print(f"[red]--format must be one of {names}, or several joined by ','[/red]")
        raise typer.Exit(2) from exc
    extra = [f for f in formats if f in ex.FORMAT_PACKAGES]  # hf, verl: the export extra's
    if extra:
        packages = [ex.FORMAT_PACKAGES[f] for f in extra]
        chosen = ",".join(f.value for f in extra)
        require_extra("export", packages, f"`polar export --format {chosen}`")
    if (workflow_id is None) == (not traces):
        console.print("[red]give either a workflow id or --traces[/red]")
        raise typer.Exit(2)
    sft = bool(ex.NEEDS_RECORDS.intersection(formats))

    async def from_workflow(wid: str) -> ex.Collected:
        from polar.client.sdk import PolarClient

        polar = await PolarClient.connect()
        return await ex.collect_workflow(polar, wid, timeout_s=timeout, with_records=sft)

    if workflow_id is not None:
        got = asyncio.run(from_workflow(workflow_id))
    else:
        from polar.storage import Storage

        sources = traces or []
        local = all(Path(s).exists() for s in sources)
        storage = None if local else Storage(get_settings(StorageSettings))
        got = ex.collect_files(sources, storage, with_records=sft)
    summary = ex.export_traces(
        got.traces,
        out,
        formats,
        min_reward=min_reward,
        rewards=got.rewards,
        records=got.records,
        source=got.source,
    )
    console.print(
        f"{summary.traces} traces from {summary.sessions} sessions → {out}: "
        f"{summary.rl_rows} RL rows, {summary.sft_rows} SFT conversations "
        f"({summary.resolved_sessions} resolved sessions, reward ≥ {min_reward:g})"
    )
    if summary.sft_skipped:
        console.print(
            f"[yellow]{summary.sft_skipped} merged traces left out of the SFT view: "
            "their CompletionRecords were not available[/yellow]"
        )
    for kind, path in summary.files.items():
        console.print(f"  {kind}: {path}")

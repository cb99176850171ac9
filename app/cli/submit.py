"""`polar submit`, `polar status` and `polar result`: submitting a task and following it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.cli.main import console
from app.cli.task_files import check_audit, load_harbor_dir, load_task_file, warn_verifier
from polar.contracts import TaskResult


async def follow_and_print(run: Any) -> TaskResult:
    """Follow a submitted task behind a progress bar of its sessions, then print its result."""
    from polar.client.sdk import PolarClient

    polar = await PolarClient.connect()
    console.print(f"submitted [bold]{run.workflow_id}[/bold]  Web UI: {polar.web_ui_url(run)}")
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as bar:
        job = bar.add_task("sessions", total=None)
        async for status in polar.follow(run, every_s=1.0):
            stages = ", ".join(f"{s.stage}" for s in status.sessions) or "starting"
            bar.update(
                job,
                total=status.total or None,
                completed=status.done,
                description=f"sessions [{stages}]",
            )
    result = await polar.wait(run)
    print_result(result, polar)
    return result


def print_result(result: TaskResult, polar: Any) -> None:
    """A task's sessions as a table, their errors and traces, and the mean reward."""
    table = Table(title=f"task {result.task_id}")
    for col in ("session", "status", "reward", "calls", "traces", "tokens", "trace bytes"):
        table.add_column(col)
    for s in result.sessions:
        table.add_row(
            s.session_id,
            s.status.value,
            "-" if s.reward is None else f"{s.reward:g}",
            str(s.num_completions),
            str(s.num_traces),
            str(s.num_response_tokens),
            str(s.trace_bytes),
        )
    console.print(table)
    for s in result.sessions:
        if s.error:
            console.print(f"[yellow]{s.session_id}: {s.error}[/yellow]")
        if s.traces_key:
            console.print(f"traces: {polar.traces_url(s)}")
    mean = result.mean_reward
    console.print(f"mean reward: {'-' if mean is None else f'{mean:.3f}'}")


def submit(
    task_file: Annotated[
        Path, typer.Argument(help="a TaskSpec JSON file, or a Harbor task or dataset dir")
    ],
    wait: Annotated[bool, typer.Option(help="follow the task and print its result")] = True,
    strict: Annotated[
        bool, typer.Option(help="refuse a task `polar tasks audit` flagged (else a warning)")
    ] = False,
    harness: Annotated[str, typer.Option(help="Harbor dirs: the harness kind")] = "pi",
) -> None:
    """Submit a TaskSpec JSON file (the same file `temporal workflow start` takes), or every
    task of a Harbor task or dataset dir (its images built first: docs/harbor.md)."""
    from polar.client.sdk import PolarClient

    is_harbor = task_file.is_dir()
    specs = load_harbor_dir(task_file, harness) if is_harbor else [load_task_file(task_file)]
    for spec in specs:
        check_audit(spec, task_file, strict)
        warn_verifier(spec)

    async def go() -> None:
        polar = await PolarClient.connect()
        for spec in specs:
            run = await polar.submit(spec)
            if wait:
                await follow_and_print(run)
            else:
                console.print(run.workflow_id)

    asyncio.run(go())


def status(workflow_id: str) -> None:
    """Show a task's status and its sessions' stages."""
    from polar.client.sdk import PolarClient

    async def go() -> None:
        st = await (await PolarClient.connect()).status(workflow_id)
        console.print(f"{st.workflow_id}: {st.status} ({st.done}/{st.total} sessions done)")
        for s in st.sessions:
            console.print(f"  {s.session_id}: {s.stage} {s.status or ''}")

    asyncio.run(go())


def result(
    workflow_id: Annotated[str, typer.Argument(help="a task's workflow id, or a session's id")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Wait for a task, or one session, and print its result."""
    from app.cli.sessions import print_session_result, session_result
    from polar.client.sdk import PolarClient

    async def go() -> None:
        polar = await PolarClient.connect()
        session = await session_result(polar.client, workflow_id)
        if session is not None:
            print_session_result(session, as_json)
            return
        res = await polar.wait(workflow_id)
        if as_json:
            print(json.dumps(res.model_dump(mode="json"), indent=2))
        else:
            print_result(res, polar)

    asyncio.run(go())

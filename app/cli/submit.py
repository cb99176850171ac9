"""`polar submit`, `polar status` and `polar result`: submitting a task and following it.

`polar submit` (following its tasks) and `polar result` end with the verdict's exit code
(polar/verdicts.py, app/cli/exit_codes.py: 0 ok, 4 task_error, 5 infra_error, 6 none
completed), and with `--json` name it in their output (`verdict`, `exit_code`)."""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.cli.exit_codes import VERDICT_CODES, ExitCode, verdict_fields
from app.cli.main import console, err_console
from app.cli.task_files import (
    check_audit,
    checked_workflow_id_option,
    harness_override,
    load_harbor_dir,
    load_task_file,
    warn_no_source,
    warn_verifier,
)

if TYPE_CHECKING:
    from polar.contracts import TaskResult

NO_VERDICT = ("task_error", "infra_error")
"""The outcome classes (polar.records.OutcomeClass, a StrEnum) that are no verdict on the
policy."""
"""Outcome classes whose detail is printed under the table (a session with no error text)."""


async def follow_and_print(run: Any) -> TaskResult:
    """Follow a submitted task (a TaskRun or its workflow id) behind a progress bar of its
    sessions, then print its result."""
    from polar.client.sdk import PolarClient

    polar = await PolarClient.connect()
    workflow_id = run if isinstance(run, str) else run.workflow_id
    console.print(f"submitted [bold]{workflow_id}[/bold]  Web UI: {polar.web_ui_url(run)}")
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


async def task_verdict_of(polar: Any, workflow_id: str, as_json: bool, submitting: bool) -> str:
    """Wait for the task, print its result and verdict, return the verdict's name.

    Text: a table and the verdict's line (`submitting`: behind a progress bar). JSON: the
    TaskResult with `verdict` and `exit_code` added (`submitting`: on one line, one per
    task). A task that ended without a result is one line on stderr, and its verdict:
    `task_error` when its spec was refused (polar.outcomes.TASK_ERRORS), else
    `none_completed`."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ApplicationError

    from polar.verdicts import failure_verdict, task_verdict

    indent = None if submitting else 2
    try:
        if submitting and not as_json:
            result = await follow_and_print(workflow_id)
        else:
            result = await polar.wait(workflow_id)
            if not as_json:
                print_result(result, polar)
    except WorkflowFailureError as exc:
        cause = exc.cause
        verdict = failure_verdict(cause.type if isinstance(cause, ApplicationError) else None)
        error = f"task {workflow_id} ended without a result: {cause or exc}"
        err_console.print(f"polar: {error}", markup=False)
        if as_json:
            fields = {"workflow_id": workflow_id, "error": error} | verdict_fields(verdict)
            print(json.dumps(fields, indent=indent))
        return verdict.value
    verdict = task_verdict(result)
    if as_json:
        print(json.dumps(result.model_dump(mode="json") | verdict_fields(verdict), indent=indent))
    else:
        say_verdict(verdict.value)
    return verdict.value


def say_verdict(verdict: str) -> None:
    """The verdict's line after a result: its name and the exit code it gives."""
    code = VERDICT_CODES[verdict]
    style = "green" if code == ExitCode.OK else "red"
    console.print(f"verdict: {verdict} (exit {int(code)})", style=style, markup=False)


def print_result(result: TaskResult, polar: Any) -> None:
    """A task's sessions as a table, their errors, outcomes and traces, and the mean reward."""
    table = Table(title=f"task {result.task_id}")
    columns = ("session", "status", "outcome", "reward", "calls", "traces", "tokens", "trace bytes")
    for col in columns:
        table.add_column(col)
    for s in result.sessions:
        table.add_row(
            s.session_id,
            s.status.value,
            "-" if s.outcome is None else s.outcome.label,
            "-" if s.reward is None else f"{s.reward:g}",
            str(s.num_completions),
            str(s.num_traces),
            str(s.num_response_tokens),
            str(s.trace_bytes),
        )
    console.print(table)
    for s in result.sessions:
        if s.error:
            console.print(f"{s.session_id}: {s.error}", style="yellow", markup=False)
        elif s.outcome is not None and s.outcome.outcome in NO_VERDICT:
            note = f"{s.session_id}: {s.outcome.label}: {s.outcome.detail}"
            console.print(note, style="yellow", markup=False)
        if s.traces_key:
            console.print(f"traces: {polar.traces_url(s)}")
    mean = result.mean_reward
    console.print(f"mean reward: {'-' if mean is None else f'{mean:.3f}'}")


def submit(
    task_file: Annotated[
        Path, typer.Argument(help="a TaskSpec JSON file, or a Harbor task or dataset dir")
    ],
    wait: Annotated[
        bool, typer.Option(help="follow the task, print its result, exit with its verdict")
    ] = True,
    strict: Annotated[
        bool,
        typer.Option(
            help="refuse a task `polar tasks audit` flagged (else a warning), and stop at a "
            "Harbor task Polar refuses (else the rest are submitted)"
        ),
    ] = False,
    harness: Annotated[str, typer.Option(help="Harbor dirs: the harness kind")] = "pi",
    command: Annotated[
        str | None, typer.Option(help="Harbor dirs: the command of `--harness command`")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Harbor dirs: the model name the harness is told")
    ] = None,
    harness_env: Annotated[
        list[str] | None, typer.Option(help="Harbor dirs: KEY=VALUE for the harness (repeat)")
    ] = None,
    workflow_id: Annotated[
        str | None, typer.Option(help="the task's workflow id (one task; default: generated)")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="each task's result as one line of JSON")
    ] = False,
) -> None:
    """Submit a TaskSpec JSON file (the same file `temporal workflow start` takes), or every
    task of a Harbor task or dataset dir (its images built first: docs/harbor.md). Following
    them, it exits with their worst verdict: 0 ok, 4 task_error, 5 infra_error, 6 none
    completed (docs/errors.md)."""
    from polar.client.sdk import PolarClient
    from polar.client.submit_checks import NoGpuWorkers, NoSourceWarning
    from polar.verdicts import Verdict, worst

    is_harbor = task_file.is_dir()
    if is_harbor:
        override = harness_override(harness, command, model, harness_env)
        specs = load_harbor_dir(task_file, override, strict=strict)
    else:
        specs = [load_task_file(task_file)]
    if workflow_id is not None:
        workflow_id = checked_workflow_id_option(workflow_id, len(specs))
    for spec in specs:
        check_audit(spec, task_file, strict)
        warn_verifier(spec)
        if not is_harbor:  # a Harbor task's image holds its workspace
            warn_no_source(spec)

    async def go() -> list[str]:
        polar = await PolarClient.connect()
        verdicts = []
        for spec in specs:
            with warnings.catch_warnings():  # said above, once, on stderr
                warnings.simplefilter("ignore", NoSourceWarning)
                run = await polar.submit(spec, workflow_id=workflow_id)
            if wait:
                verdicts.append(await task_verdict_of(polar, run.workflow_id, as_json, True))
            elif as_json:
                print(json.dumps({"task_id": run.task_id, "workflow_id": run.workflow_id}))
            else:
                console.print(run.workflow_id)
        return verdicts

    try:
        verdicts = asyncio.run(go())
    except NoGpuWorkers as exc:  # no worker of the deployment declares the GPUs it asks for
        err_console.print(f"refused: {exc}", style="red", markup=False)
        raise typer.Exit(ExitCode.INVALID_INPUT) from exc
    if wait:
        raise typer.Exit(VERDICT_CODES[worst(Verdict(v) for v in verdicts)])


def existing_workflow_id(workflow_id: str) -> str:
    """`workflow_id` if it is a valid id (polar/ids.py); else one line on stderr and exit 1,
    as for an unknown id: no such workflow can exist."""
    from app.cli.sessions import fail
    from polar.ids import InvalidId, checked_workflow_id

    try:
        return checked_workflow_id(workflow_id)
    except InvalidId as exc:
        fail(f"not found: {exc}")


def status(workflow_id: str) -> None:
    """Show a task's status and its sessions' stages."""
    from polar.client.sdk import PolarClient

    workflow_id = existing_workflow_id(workflow_id)

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
    """Wait for a task, or one session, and print its result; exit with its verdict: 0 ok,
    4 task_error, 5 infra_error, 6 none completed (docs/errors.md)."""
    from app.cli.sessions import print_session_result, session_result
    from polar.client.sdk import PolarClient
    from polar.verdicts import session_verdict

    workflow_id = existing_workflow_id(workflow_id)

    async def go() -> str:
        polar = await PolarClient.connect()
        session = await session_result(polar.client, workflow_id)
        if session is None:
            return await task_verdict_of(polar, workflow_id, as_json, False)
        verdict = session_verdict(session)
        print_session_result(session, as_json, verdict_fields(verdict))
        if not as_json:
            say_verdict(verdict.value)
        return verdict.value

    raise typer.Exit(VERDICT_CODES[asyncio.run(go())])

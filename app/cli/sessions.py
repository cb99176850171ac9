"""`polar logs` and `polar show`, and `polar result` of a session: one session in the terminal.

They read what the console reads, through its readers (app/console: `session_view`,
`SessionObjects`), and print it through `app.cli.session_text`, which escapes every
control character the session's text holds. An unknown or invalid id is one line on
stderr and exit 1."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from app.cli.session_text import (
    STAGES,
    conversation_text,
    logs_text,
    session_result_text,
    terminal_safe,
)

if TYPE_CHECKING:
    from polar.contracts import SessionResult

LOG_MAX_BYTES = 64 * 1024 * 1024
"""The most of one log `polar logs` prints (its end); logs are bounded when stored."""


def fail(message: str) -> NoReturn:
    """One line on stderr, exit 1."""
    print(f"polar: {terminal_safe(message)}", file=sys.stderr)
    raise typer.Exit(1)


def checked_session_id(session_id: str) -> str:
    from polar.ids import InvalidId, checked_id

    try:
        return checked_id(session_id, "session id")
    except InvalidId:
        fail(f"not a session id: {session_id!r}")


async def readers() -> tuple[Any, Any]:
    """The console's Temporal and S3 readers, on this process's settings."""
    from app.console.session_objects import SessionObjects
    from app.console.temporal_reads import TemporalReads
    from polar.settings import ClientSettings, get_settings
    from polar.storage import Storage
    from polar.temporal_client import connect

    settings = get_settings(ClientSettings)
    return TemporalReads(await connect(settings)), SessionObjects(Storage(settings))


async def known(reads: Any, objects: Any, session_id: str) -> bool:
    """Whether S3 holds anything of the session or Temporal has its Session workflow."""
    from polar.storage import session_prefix

    if await objects.keys(session_prefix(session_id)):
        return True
    execution = await reads.describe(session_id)
    return execution is not None and execution.workflow_type == "Session"


def cut_note(cut: bool) -> str:
    return f"[… cut: its last {LOG_MAX_BYTES} bytes follow]\n" if cut else ""


def logs(
    session_id: Annotated[str, typer.Argument(help="the session's id (its workflow id)")],
    stage: Annotated[
        str | None, typer.Option(help="run (the harness's logs) or evaluate (the evaluator's)")
    ] = None,
) -> None:
    """Print a session's stdout and stderr by stage: the harness's, then the evaluator's."""
    if stage is not None and stage not in STAGES:
        fail(f"--stage: one of {', '.join(STAGES)}, not {stage!r}")
    session_id = checked_session_id(session_id)

    async def go() -> str:
        reads, objects = await readers()
        artifacts = await objects.artifacts(session_id)
        keys = [*artifacts.harness_logs, *artifacts.eval_logs]
        if not keys and not await known(reads, objects, session_id):
            fail(f"no session {session_id}")
        texts = await asyncio.gather(*(objects.text(k, tail=LOG_MAX_BYTES) for k in keys))
        shown = [(key, cut_note(cut) + text) for key, (text, cut) in zip(keys, texts, strict=True)]
        found = logs_text(session_id, shown, stage)
        return found or f"no {stage + ' ' if stage else ''}logs of {session_id}\n"

    print(asyncio.run(go()), end="")


def show(
    session_id: Annotated[str, typer.Argument(help="the session's id (its workflow id)")],
) -> None:
    """Print a session's conversation (one block per model call: who said what, tool calls,
    finish reason), its trained-token counts, reward and outcome."""
    from app.console.session_page import session_view

    session_id = checked_session_id(session_id)

    async def go() -> str:
        reads, objects = await readers()
        view = await session_view(reads, objects, session_id)
        if view is None:
            fail(f"no session {session_id}")
        return conversation_text(view.row, view.status, view.calls, view.traces)

    print(asyncio.run(go()), end="")


async def session_result(client: Any, workflow_id: str) -> SessionResult | None:
    """The result of `workflow_id` if it is a Session (waiting for it); None if it is a
    RolloutTask; one line and exit 1 if there is no such workflow or it is neither; one line
    and its verdict's code (4 or 6, docs/errors.md) if it ended without a result."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ApplicationError
    from temporalio.service import RPCError, RPCStatusCode

    from app.cli.exit_codes import VERDICT_CODES
    from polar.contracts import SessionResult
    from polar.verdicts import failure_verdict

    handle = client.get_workflow_handle(workflow_id)
    try:
        kind = (await handle.describe()).workflow_type
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            fail(f"no task or session {workflow_id}")
        raise
    if kind == "RolloutTask":
        return None
    if kind != "Session":
        fail(f"{workflow_id} is a {kind} workflow, not a task or a session")
    try:
        return await client.get_workflow_handle(workflow_id, result_type=SessionResult).result()
    except WorkflowFailureError as exc:  # one line, and the verdict's code (as a task's)
        cause = exc.cause
        verdict = failure_verdict(cause.type if isinstance(cause, ApplicationError) else None)
        note = f"session {workflow_id} ended without a result: {cause or exc}"
        print(f"polar: {terminal_safe(note)}", file=sys.stderr)
        raise typer.Exit(VERDICT_CODES[verdict]) from None


def print_session_result(
    result: SessionResult, as_json: bool, extra: dict[str, Any] | None = None
) -> None:
    """The session's result as text, or as JSON with `extra` fields (its verdict) added."""
    if as_json:
        print(json.dumps(result.model_dump(mode="json") | (extra or {}), indent=2))
    else:
        print(session_result_text(result), end="")

"""The console's web app: `create_app(settings)` and its pages (read-only, server-rendered).

/                                 tasks (filters: task, harness, runtime, status, since)
/tasks/{workflow or task id}      one task run: its sessions, rewards, advantages, audit
/tasks/{id}/compare?session=...   sessions of the task side by side (none named: all)
/training                         tasks tagged with a policy version, per version, as a chart
/topology                         gateways, replicas, pools, workers by queue and host, services
/sessions/{id}                    one session: stages, calls, traces, grade, logs
/sessions/{id}/calls/{n}          one call: request as sent and normalised, response
/sessions/{id}/traces/{n}         one trace, token by token
/raw/{key}                        an S3 object of Polar's as text/plain (or ?download=1)
"""

from __future__ import annotations

import asyncio
import json
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from temporalio.client import Client
from temporalio.service import RPCError

from app.console.calls import pretty, replica_of
from app.console.compare import (
    MAX_COMPARED,
    ClosedConversations,
    CompareError,
    compare_sessions,
    selected,
)
from app.console.exports import DOWNLOADS, session_export
from app.console.filters import BadFilter, TaskFilters, checked_text
from app.console.safety import Redactor, raw_key_allowed, security_headers, template_environment
from app.console.session_objects import SessionObjects
from app.console.session_page import session_view
from app.console.task_page import task_view
from app.console.temporal_reads import TemporalReads
from app.console.tokens import trace_view
from app.console.topology import topology
from app.console.training import by_version
from polar.client.export import ExportFormat
from polar.ids import InvalidId, checked_id
from polar.record_codec import RECORD_SUFFIX, decode_record
from polar.settings import ConsoleSettings
from polar.storage import Storage, completion_key, legacy_completion_key
from polar.temporal_client import connect

STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}


class NotFound(Exception):
    """A page of something that does not exist."""


class Unavailable(Exception):
    """Temporal cannot be reached (the page says so; the next request tries again)."""


class Console:
    """The app's state: settings, templates, redaction, S3 reads, Temporal (connected lazily)."""

    def __init__(
        self, settings: ConsoleSettings, client: Client | None, storage: Storage | None
    ) -> None:
        self.settings = settings
        self.redact = Redactor(settings)
        self.env = template_environment(settings, self.redact)
        self.objects = SessionObjects(storage or Storage(settings))
        self.conversations = ClosedConversations()
        self.env.globals["max_compared"] = MAX_COMPARED
        self.env.globals["export_formats"] = [f.value for f in DOWNLOADS]
        self._reads = TemporalReads(client) if client is not None else None
        self._lock = asyncio.Lock()
        model_dir = getattr(settings, "model_dir", None)
        self.tokenizer_dir: Path | None = settings.console_tokenizer_dir or model_dir

    async def reads(self) -> TemporalReads:
        async with self._lock:
            if self._reads is None:
                try:
                    self._reads = TemporalReads(await connect(self.settings))
                except RuntimeError as exc:  # the SDK's "Failed client connect"
                    raise Unavailable(
                        f"cannot reach Temporal at {self.settings.temporal_address}"
                    ) from exc
            return self._reads

    def page(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(template).render(**context)
        return HTMLResponse(html, status_code=status)

    def problem(self, status: int, message: str) -> HTMLResponse:
        return self.page("problem.html", status, title=f"{status}", message=message)


def create_app(
    settings: ConsoleSettings, *, client: Client | None = None, storage: Storage | None = None
) -> FastAPI:
    """The console app over `settings`' Temporal and S3 (`client`, `storage`: already made)."""
    console = Console(settings, client, storage)
    app = FastAPI(title="Polar console", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.console = console
    app.middleware("http")(security_headers)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> HTMLResponse:
        return console.problem(404, str(exc))

    @app.exception_handler(Unavailable)
    async def unavailable(request: Request, exc: Unavailable) -> HTMLResponse:
        return console.problem(503, str(exc))

    @app.exception_handler(RPCError)
    async def temporal_failed(request: Request, exc: RPCError) -> HTMLResponse:
        return console.problem(502, f"Temporal did not answer: {exc.message}")

    @app.exception_handler(BadFilter)
    async def bad_filter(request: Request, exc: BadFilter) -> HTMLResponse:
        return console.problem(400, str(exc))

    add_pages(app, console)
    add_overviews(app, console)
    add_files(app, console)
    return app


def add_pages(app: FastAPI, console: Console) -> None:
    """The HTML pages."""

    @app.get("/", response_class=HTMLResponse)
    async def tasks(filters: Annotated[TaskFilters, Depends(TaskFilters.parse)]) -> HTMLResponse:
        rows = await (await console.reads()).tasks(filters)
        return console.page("tasks.html", filters=filters, rows=rows)

    @app.get("/tasks/{ref}", response_class=HTMLResponse)
    async def task(ref: str) -> HTMLResponse:
        ref = checked_text("task", ref) or ""
        view = await task_view(await console.reads(), console.objects, ref)
        if view is None:
            raise NotFound(f"no task {ref}")
        return console.page("task.html", view=view)

    @app.get("/sessions/{session_id}", response_class=HTMLResponse)
    async def session(session_id: str) -> HTMLResponse:
        view = await session_view(await console.reads(), console.objects, safe_id(session_id))
        if view is None:
            raise NotFound(f"no session {session_id}")
        return console.page("session.html", view=view)

    @app.get("/sessions/{session_id}/calls/{record_id}", response_class=HTMLResponse)
    async def call(session_id: str, record_id: str) -> HTMLResponse:
        sid = safe_id(session_id)
        try:
            keys = [completion_key(sid, record_id), legacy_completion_key(sid, record_id)]
        except InvalidId as exc:
            raise NotFound(str(exc)) from None
        for key in keys:
            try:
                record = decode_record(await console.objects.get(key))
            except KeyError:
                continue
            parts = {name: pretty(record.get(name)) for name in CALL_PARTS}
            replica = replica_of(record.get("upstream_url"))
            return console.page(
                "call.html", session_id=sid, key=key, record=record, parts=parts, replica=replica
            )
        raise NotFound(f"no call {record_id} in session {session_id}")

    @app.get("/sessions/{session_id}/traces/{n}", response_class=HTMLResponse)
    async def trace(
        session_id: str, n: int, file: str | None = None, tokens: str | None = None
    ) -> HTMLResponse:
        keys = await console.objects.traces_keys(safe_id(session_id))
        key = next((k for k in keys if k.rsplit("/", 1)[-1] == file), keys[0] if keys else None)
        found = await console.objects.trace(key, n) if key else None
        if key is None or found is None:
            raise NotFound(f"no trace {n} in session {session_id}")
        view = await asyncio.to_thread(
            trace_view, found, console.tokenizer_dir, console.redact.spans, tokens == "all"
        )
        return console.page("trace.html", session_id=session_id, n=n, key=key, view=view)

    @app.get("/sessions/{session_id}/export/{fmt}")
    async def export(session_id: str, fmt: str, file: str | None = None) -> Response:
        try:
            chosen = ExportFormat(fmt)
        except ValueError:
            raise NotFound(f"no export format {fmt!r}") from None
        if chosen not in DOWNLOADS:
            raise NotFound(f"{fmt}: not offered here (`polar export` writes it)")
        keys = await console.objects.traces_keys(safe_id(session_id))
        key = next((k for k in keys if k.rsplit("/", 1)[-1] == file), keys[0] if keys else None)
        if key is None:
            raise NotFound(f"no traces in session {session_id}")
        storage = console.objects.storage
        name, text = await asyncio.to_thread(session_export, storage, key, chosen)
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in session_id)[:80]
        return Response(
            console.redact(text).encode(),
            media_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{safe}-{name}"'},
        )


def add_overviews(app: FastAPI, console: Console) -> None:
    """The pages over many sessions or tasks: compare, training, topology."""

    @app.get("/tasks/{ref}/compare", response_class=HTMLResponse)
    async def compare(
        ref: str, session: Annotated[list[str] | None, Query()] = None
    ) -> HTMLResponse:
        ref = checked_text("task", ref) or ""
        view = await task_view(await console.reads(), console.objects, ref)
        if view is None:
            raise NotFound(f"no task {ref}")
        try:
            rows = selected(view.sessions, session or [])
        except CompareError as exc:
            return console.problem(400, str(exc))
        items = await compare_sessions(console.objects, rows, console.conversations)
        return console.page("compare.html", view=view, items=items)

    @app.get("/training", response_class=HTMLResponse)
    async def training(
        task: str | None = None,
        harness: str | None = None,
        since: str | None = None,
        limit: int = TRAINING_TASKS,
    ) -> HTMLResponse:
        filters = TaskFilters.parse(task=task, harness=harness, since=since)
        reads = await console.reads()
        cap = max(1, min(limit, MAX_TRAINING_TASKS))
        executions = await reads.executions(filters.visibility_query(), cap)
        rows = await asyncio.gather(*(reads.task_row(e) for e in executions))
        versions = by_version(list(rows))
        return console.page(
            "training.html", filters=filters, versions=versions, read=len(rows), limit=cap
        )

    @app.get("/topology", response_class=HTMLResponse)
    async def topology_page() -> HTMLResponse:
        found = await topology((await console.reads()).client, console.settings)
        return console.page("topology.html", view=found)


CALL_PARTS = ("request", "normalized_request", "response")
TRAINING_TASKS, MAX_TRAINING_TASKS = 500, 2000
"""How many of the newest tasks the training page reads by default, and at most."""


def safe_id(value: str) -> str:
    try:
        return checked_id(value, "session id")
    except InvalidId as exc:
        raise NotFound(str(exc)) from None


def add_files(app: FastAPI, console: Console) -> None:
    """The stylesheet, the script, raw S3 objects and a health check."""

    @app.get("/static/{name}")
    async def static(name: str) -> Response:
        if name not in STATIC:
            raise NotFound(name)
        data = resources.files("app.console").joinpath("static", name).read_bytes()
        return Response(data, media_type=STATIC[name])

    @app.get("/raw/{key:path}")
    async def raw(key: str, download: bool = False) -> Response:
        if not raw_key_allowed(key):
            raise NotFound("not one of Polar's objects")
        try:
            data = await console.objects.get(key)
        except KeyError:
            raise NotFound(f"no object {key}") from None
        text = raw_text(key, data)
        body = console.redact(text) if text is not None else None
        if download:
            name = key.rsplit("/", 1)[-1].removesuffix(".zst") if text is not None else "object"
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:100]
            payload = body.encode() if body is not None else data
            return Response(
                payload,
                media_type="application/octet-stream",
                headers={"Content-Disposition": f'attachment; filename="{safe or "object"}"'},
            )
        if body is None:
            return PlainTextResponse(f"binary object, {len(data)} bytes: download it")
        return PlainTextResponse(body)

    @app.get("/health")
    async def health() -> PlainTextResponse:
        return PlainTextResponse("ok")


def raw_text(key: str, data: bytes) -> str | None:
    """An object as text: a completion record as its JSON, other text as is; None: binary."""
    if key.endswith(RECORD_SUFFIX):
        return json.dumps(decode_record(data), indent=2, ensure_ascii=False)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None

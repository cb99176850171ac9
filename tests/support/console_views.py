"""Console page data made by hand, for rendering the console's templates without a stack.

`hostile_views(text)` builds the data of every page with `text` in each field a policy,
harness or test could write: model replies, tool calls, logs, patches, reports, file
names, ids, errors, token texts. `markup_is_the_consoles` checks a rendered page holds
only the console's own tags, attributes and links.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any

from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.client import WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import TypedSearchAttributes
from temporalio.converter import DataConverter

from app.console.calls import CallEntry, pretty
from app.console.filters import TaskFilters
from app.console.grade import GradeFacts, Rubric, TestResult
from app.console.session_objects import Artifacts, TraceSummary
from app.console.session_page import SessionView, StageStep
from app.console.task_page import TaskView
from app.console.tokens import TokenView, TraceView
from app.console.views import HistogramBar, SessionRow, TaskRow
from polar.contracts import SessionResult
from polar.records import SessionStatus, Trace, TraceProvenance

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SID = "s-1"


def execution(workflow_id: str = SID, root_id: str = "task-1") -> WorkflowExecution:
    return WorkflowExecution(
        close_time=NOW,
        execution_time=NOW,
        history_length=10,
        id=workflow_id,
        namespace="default",
        parent_id=root_id,
        parent_run_id=None,
        root_id=root_id,
        root_run_id=None,
        raw_info=WorkflowExecutionInfo(),
        run_id="run-1",
        search_attributes={},
        start_time=NOW,
        status=WorkflowExecutionStatus.COMPLETED,
        task_queue="polar",
        typed_search_attributes=TypedSearchAttributes([]),
        workflow_type="Session",
        _context_free_data_converter=DataConverter.default,
    )


def task_row(text: str) -> TaskRow:
    return TaskRow(
        workflow_id=f"task-{text}",
        task_id=text,
        harness=text,
        runtime=text,
        status="completed",
        started=NOW,
        closed=NOW,
        wall_s=12.5,
        total=2,
        done=2,
        outcome_counts={text: 1, "ok": 1},
        mean_reward=0.5,
        error=text,
    )


def session_row(text: str) -> SessionRow:
    return SessionRow(
        session_id=text,
        index=0,
        status=text,
        stage=text,
        outcome=text,
        reason=text,
        reward=1.0,
        calls=2,
        trained_tokens=10,
        stage_seconds={text: 1.0, "run": 2.0},
        hosts=[text],
        attempts=2,
        error=text,
        advantage=0.7,
    )


def call_entry(text: str) -> CallEntry:
    return CallEntry(
        n=0,
        record_id=text,
        attempt=1,
        provider=text,
        model=text,
        status_code=200,
        error=text,
        finish_reason=text,
        latency_s=0.25,
        started_at=0.0,
        prompt_tokens=3,
        response_tokens=2,
        training=text,
        last_message=text,
        sent_last=f"sent {text}",
        gateway=text,
        response_text=text,
        tool_calls=[text],
        normalized_changes=[text],
        replica=text,
        policy_version=3,
    )


def session_view(text: str) -> SessionView:
    result = SessionResult(
        session_id=SID,
        task_id=text,
        index=0,
        status=SessionStatus.HARNESS_FAILED,
        reward=0.0,
        harness=text,
        evaluation=text,
        error=text,
        warnings=[text],
        infra_attempts=[text],
        hosts=[text],
    )
    log = f"sessions/{SID}/artifacts/harness-attempt1.stdout"
    artifacts = Artifacts(keys=[f"sessions/{SID}/artifacts/{text}", log], harness_logs=[log])
    return SessionView(
        session_id=SID,
        execution=execution(),
        status="completed",
        row=session_row(text),
        result=result,
        progress=None,
        spec={"task": {"task_id": text, "harness": {"kind": text}, "runtime": {"kind": text}}},
        steps=[
            StageStep(
                activity=text,
                stage=text,
                queue=text,
                scheduled=NOW,
                activity_id=text,
                attempts=2,
                worker=text,
                ended=NOW,
                state="failed",
                failure=text,
            )
        ],
        calls=[call_entry(text)],
        traces_key=f"sessions/{SID}/traces/per_request.jsonl",
        traces=[TraceSummary(0, text, 3, 2, 1, 1.0, [text], text, 3)],
        artifacts=artifacts,
        logs={log: (text, True)},
        reports={f"sessions/{SID}/artifacts/{text}-report.json": text},
        grades={
            f"sessions/{SID}/artifacts/{text}-report.json": GradeFacts(
                tests=[TestResult(text, text, text)],
                components={text: 1.0},
                rubric=Rubric(0.5, text, text, text, 1.0, 0.75),
                protected_dropped=[text],
                dropped=[text],
                problems=[text],
            )
        },
        patches={f"sessions/{SID}/artifacts/x.patch": f"+++ b/{text}\n+{text}\n-{text}"},
    )


def trace_view(text: str) -> TraceView:
    trace = Trace(
        trace_id=text,
        prompt_ids=[1, 2],
        response_ids=[3, 4],
        loss_mask=[1, 0],
        response_logprobs=[-0.1, 0.0],
        reward=1.0,
        provenance=TraceProvenance(
            session_id=SID,
            task_id=text,
            harness=text,
            builder=text,
            model=text,
            completion_seqs=[1],
            record_ids=[text],
            policy_version=3,
        ),
    )
    prompt = [TokenView(text, "prompt", "", text)]
    response = [TokenView(text, "trained", "lp2", text), TokenView(text, "context", "", text)]
    return TraceView(trace, prompt, response, text)


def hostile_views(text: str) -> dict[str, dict[str, Any]]:
    """Each template's context, with `text` in every field that comes from data."""
    return {
        "tasks.html": {"filters": TaskFilters(), "rows": [task_row(text)]},
        "task.html": {
            "view": TaskView(
                task_row(text),
                [session_row(text)],
                [HistogramBar(0.0, 1.0, 1, 100)],
                True,
                [task_row(text)],
            )
        },
        "session.html": {"view": session_view(text)},
        "call.html": {
            "session_id": SID,
            "n": 0,
            "key": f"sessions/{SID}/completions/r.json.zst",
            "record": {"record_id": text, "provider": text, "error": text, "policy_version": 3},
            "replica": text,
            "parts": {
                name: pretty({"content": text})
                for name in ("request", "normalized_request", "response")
            },
        },
        "trace.html": {
            "session_id": SID,
            "n": 0,
            "key": f"sessions/{SID}/traces/x.jsonl",
            "view": trace_view(text),
        },
        "problem.html": {"title": text, "message": text},
    }


ALLOWED_TAGS = {
    "html", "head", "meta", "title", "link", "script", "body", "header", "nav", "main",
    "a", "h1", "h2", "h3", "p", "span", "div", "dl", "dt", "dd", "ul", "ol", "li", "pre",
    "table", "thead", "tbody", "tr", "th", "td", "form", "label", "input", "select",
    "option", "button", "section",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "lang", "charset", "rel", "href", "src", "defer", "id", "class", "title", "method",
    "action", "name", "value", "selected", "type", "start", "data-workflow", "data-session",
    "colspan",
}  # fmt: skip


class Tags(HTMLParser):
    """Every start tag and attribute of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def markup_is_the_consoles(page: str, html: str, web_ui: str) -> None:
    """Only the console's own tags and attributes in `html`; links to its own paths or the
    Web UI at `web_ui` only; its one script: AssertionError naming what is not."""
    parser = Tags()
    parser.feed(html)
    for tag, attrs in parser.tags:
        assert tag in ALLOWED_TAGS, f"{page}: <{tag}>"
        for name, value in attrs:
            assert name in ALLOWED_ATTRIBUTES, f"{page}: <{tag} {name}=...>"
            if name in ("href", "src", "action"):
                assert value is not None and (
                    value.startswith("/")
                    and not value.startswith("//")
                    or value.startswith(f"{web_ui.rstrip('/')}/namespaces/")
                ), f"{page}: {name}={value!r}"
        if tag == "script":
            assert dict(attrs).get("src") == "/static/console.js"

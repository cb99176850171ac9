"""A session as terminal text: control characters escaped, logs by stage, calls as blocks."""

from __future__ import annotations

from app.cli.session_text import (
    call_block,
    heading,
    logs_text,
    session_result_text,
    terminal_safe,
)
from app.console.calls import CallEntry
from app.console.views import SessionRow
from polar.contracts import SessionResult
from polar.records import SessionStatus
from polar.storage import artifact_key

SID = "t-abc-s0"


def test_control_characters_are_shown_not_acted_on() -> None:
    hostile = "a\x1b[2Jb\x07c\rd\x00e\x7ff\x9b31mg\u202eh\u2066i"
    assert terminal_safe(hostile) == ("a\\x1b[2Jb\\x07c\\x0dd\\x00e\\x7ff\\x9b31mg\\u202eh\\u2066i")
    assert terminal_safe("line one\n\tindented é ✓") == "line one\n\tindented é ✓"


def test_logs_come_by_stage_stdout_first_and_a_stage_alone() -> None:
    logs = [
        (artifact_key(SID, "evaluate.stderr"), ""),
        (artifact_key(SID, "harness-attempt1.stderr"), "gave up \x1b]0;t\x07\n"),
        (artifact_key(SID, "evaluate.stdout"), "1 passed\n"),
        (artifact_key(SID, "harness-attempt1.stdout"), "working\n"),
    ]
    text = logs_text(SID, logs, None)
    assert text == (
        "==> run · harness-attempt1.stdout <==\nworking\n\n"
        "==> run · harness-attempt1.stderr <==\ngave up \\x1b]0;t\\x07\n\n"
        "==> evaluate · evaluate.stdout <==\n1 passed\n\n"
        "==> evaluate · evaluate.stderr <==\n(empty)\n"
    )
    assert "==> run" not in logs_text(SID, logs, "evaluate")
    assert "==> evaluate" not in logs_text(SID, logs, "run")


def call(**changes: object) -> CallEntry:
    fields: dict[str, object] = dict(
        n=0,
        record_id="r0",
        attempt=1,
        provider="openai_chat",
        model="policy",
        status_code=200,
        error=None,
        finish_reason="tool_calls",
        latency_s=0.25,
        started_at=0.0,
        prompt_tokens=10,
        response_tokens=4,
        training="trained",
        last_message="user: fix \x1b[31mit",
        sent_last="",
        gateway="g1",
        response_text="on it",
        tool_calls=["bash({'cmd': 'ls'})"],
    )
    fields.update(changes)
    return CallEntry(**fields)  # type: ignore[arg-type]


def test_a_call_says_who_said_what_its_tools_and_finish_reason() -> None:
    assert call_block(call()) == (
        "── call 0 · openai_chat · policy · HTTP 200 · finish tool_calls · 0.25s · "
        "10 prompt → 4 response tokens · trained\n"
        "user: fix \\x1b[31mit\n"
        "assistant: on it\n"
        "tool call: bash({'cmd': 'ls'})"
    )
    refused = call_block(call(status_code=400, error="bad \x1b", response_text="", tool_calls=[]))
    assert "HTTP 400" in refused and "error: bad \\x1b" in refused


def test_the_heading_and_the_result_escape_what_the_session_wrote() -> None:
    row = SessionRow(SID, 0, "error", outcome="infra_error", reason="x", error="run: \x1b[8m")
    assert heading(row, "completed") == (
        f"session {SID}\nstatus error (workflow completed) · outcome infra_error (x) · reward -\n"
        "error: run: \\x1b[8m"
    )
    result = SessionResult(
        session_id=SID,
        task_id="t",
        index=0,
        status=SessionStatus.HARNESS_FAILED,
        harness="command",
        reward=0.0,
        error="run_harness: exit 3 \x1b]0;x\x07",
    )
    text = session_result_text(result)
    assert "status harness_failed · outcome policy_failure · reward 0\n" in text
    assert "error: run_harness: exit 3 \\x1b]0;x\\x07\n" in text and "\x1b" not in text


def test_the_result_lists_what_the_session_stored_by_name() -> None:
    result = SessionResult(
        session_id=SID,
        task_id="t",
        index=0,
        status=SessionStatus.COMPLETED,
        harness="command",
        artifacts={
            "harness.stdout": artifact_key(SID, "harness-attempt1.stdout"),
            "evaluation.patch": artifact_key(SID, "command-model.patch"),
        },
    )
    text = session_result_text(result)
    assert text.endswith(
        "artifacts:\n"
        f"  harness.stdout: {artifact_key(SID, 'harness-attempt1.stdout')}\n"
        f"  evaluation.patch: {artifact_key(SID, 'command-model.patch')}\n"
    )
    assert "artifacts:" not in session_result_text(result.model_copy(update={"artifacts": {}}))

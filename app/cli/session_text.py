"""One session as terminal text: its conversation, its logs by stage, its result.

Everything a session holds is the policy's or the harness's writing, so every piece of it
goes through `terminal_safe` before it is printed: control characters (ESC and the other
C0 and C1 controls but newline and tab, DEL, carriage return) and the bidirectional
overrides become visible escapes, so no sequence in a model reply or a log can move the
cursor, retitle the window, rewrite a line or hide text."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.console.calls import CallEntry
    from app.console.session_objects import TraceSummary
    from app.console.views import SessionRow
    from polar.contracts import SessionResult


def artifact_name_of(session_id: str, key: str) -> str:
    """An artifact's name in its session (the console's rule, imported when first used)."""
    from app.console.session_objects import artifact_name

    return artifact_name(session_id, key)


UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""What a terminal would act on or reorder: C0 controls but tab and newline, DEL, C1
controls, and the Unicode direction marks, embeddings, overrides and isolates."""

STAGES = ("run", "evaluate")
"""The stages whose stdout and stderr a session keeps: the harness's and the evaluator's."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """`text` with every control character a terminal would act on shown as an escape."""
    return UNSAFE.sub(_escape, text)


def reward_text(reward: float | None) -> str:
    return "-" if reward is None else f"{reward:g}"


def log_stage(session_id: str, key: str) -> str:
    """The stage a log artifact belongs to: the harness's (`run`) or the evaluator's."""
    return "run" if artifact_name_of(session_id, key).startswith("harness-attempt") else "evaluate"


def logs_text(session_id: str, logs: Iterable[tuple[str, str]], stage: str | None) -> str:
    """The session's logs (key, text) under one header each, its stage and name, the
    harness's first, each stdout before its stderr; those of `stage` alone if given."""

    def order(item: tuple[str, str]) -> tuple[int, str, bool]:
        key = item[0]
        return (
            STAGES.index(log_stage(session_id, key)),
            key.rsplit(".", 1)[0],
            key.endswith("err"),
        )

    blocks = []
    for key, text in sorted(logs, key=order):
        at = log_stage(session_id, key)
        if stage is not None and at != stage:
            continue
        name = artifact_name_of(session_id, key)
        body = terminal_safe(text).rstrip("\n") or "(empty)"
        blocks.append(f"==> {at} · {terminal_safe(name)} <==\n{body}\n")
    return "\n".join(blocks)


def heading(row: SessionRow, status: str) -> str:
    """The session's first lines: id, status, outcome, reward, calls, trained tokens."""
    outcome = row.outcome or "-"
    if row.reason:
        outcome += f" ({row.reason})"
    lines = [
        f"session {row.session_id}",
        f"status {row.status} (workflow {status}) · outcome {outcome} · "
        f"reward {reward_text(row.reward)}",
    ]
    if row.error:
        lines.append(f"error: {row.error}")
    return terminal_safe("\n".join(lines))


def call_block(call: CallEntry) -> str:
    """One model call: its line of facts, what the caller said, what the model answered."""
    finish = call.finish_reason or "-"
    facts = (
        f"── call {call.n} · {call.provider or '?'} · {call.model or '?'} · "
        f"HTTP {call.status_code} · finish {finish} · {call.latency_s:.2f}s · "
        f"{call.prompt_tokens} prompt → {call.response_tokens} response tokens · {call.training}"
    )
    lines = [facts]
    if call.last_message:
        lines.append(call.last_message)
    if call.error:
        lines.append(f"error: {call.error}")
    if call.response_text:
        lines.append(f"assistant: {call.response_text}")
    lines.extend(f"tool call: {tool}" for tool in call.tool_calls)
    return terminal_safe("\n".join(lines))


def traces_text(traces: list[TraceSummary]) -> str:
    """The session's traces: tokens in each, trained tokens, reward; and the total trained."""
    total = sum(t.trained_tokens for t in traces)
    lines = [f"traces {len(traces)} · trained tokens {total}"]
    for t in traces:
        lines.append(
            f"  trace {t.n}: {t.prompt_tokens} prompt, {t.response_tokens} response, "
            f"{t.trained_tokens} trained tokens · reward {reward_text(t.reward)} · "
            f"{len(t.record_ids)} calls"
        )
    return terminal_safe("\n".join(lines))


def conversation_text(
    row: SessionRow, status: str, calls: list[CallEntry], traces: list[TraceSummary]
) -> str:
    """`polar show`: the heading, one block per model call, the traces' token counts."""
    parts = [heading(row, status), f"calls {len(calls)}"]
    parts.extend(call_block(call) for call in calls)
    parts.append(traces_text(traces))
    return "\n\n".join(parts) + "\n"


def session_result_text(result: SessionResult) -> str:
    """`polar result SESSION`: the session's status, outcome, reward, counts, error and the
    keys of what it stored."""
    outcome = result.outcome
    lines = [
        f"session {result.session_id} (task {result.task_id}, index {result.index})",
        f"status {result.status.value} · outcome {outcome.label if outcome else '-'} · "
        f"reward {reward_text(result.reward)}",
        f"calls {result.num_completions} · traces {result.num_traces} · "
        f"response tokens {result.num_response_tokens}",
    ]
    if result.stage_seconds:
        lines.append(
            "stages " + " · ".join(f"{k} {v:.1f}s" for k, v in result.stage_seconds.items())
        )
    if result.error:
        lines.append(f"error: {result.error}")
    lines.extend(f"warning: {w}" for w in result.warnings)
    if result.traces_key:
        lines.append(f"traces: {result.traces_key}")
    if result.artifacts:  # name → S3 key (docs/traces.md, "What a session stores")
        lines.append("artifacts:")
        lines.extend(f"  {name}: {key}" for name, key in result.artifacts.items())
    return terminal_safe("\n".join(lines)) + "\n"

"""The SFT view of `polar export` (`sft.jsonl`): one conversation per resolved session's call.

A session is resolved when its reward is at least `min_reward` (default 1.0) and its status
is `completed`. Each of its traces gives the conversation of its last call: that call's
request messages plus the assistant message it answered (None-valued fields dropped), and
that call's tools. A conversation that a later call of the same session continues (its
messages then the same assistant turn, compared by visible text and parsed tool calls) is
dropped, so `per_request` traces yield each conversation once, not every prefix of it. A
merged trace's last call is only known from its CompletionRecord: without `records`, such a
trace is skipped and counted. A call of `n > 1` choices gives one trace per choice (the
builders); each trace renders its own choice.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polar.builders.base import response_message
from polar.records import CompletionRecord, SessionStatus, Trace

RecordIndex = Mapping[tuple[str, str], CompletionRecord]
"""CompletionRecords by (session id, record id) (`polar.client.export.index_records`)."""
REWARD_TOLERANCE = 1e-9
"""session_normalized rewards times the trace count may miss the threshold by rounding."""


def session_rewards(traces: Iterable[Trace]) -> dict[str, float | None]:
    """Each session's outcome reward, recovered from its traces' rewards and reward policy."""
    rewards: dict[str, float | None] = {}
    for trace in traces:
        sid = trace.provenance.session_id
        if trace.reward is None:
            rewards.setdefault(sid, None)
            continue
        reward = trace.reward
        if trace.provenance.reward_policy == "session_normalized":
            stats = trace.provenance.reconstruction
            reward *= stats.chains if stats is not None else 1
        rewards[sid] = reward
    return rewards


def message_text(content: Any) -> str:
    """A message content's text (a list of parts: their texts, a line each)."""
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _turn_key(message: Mapping[str, Any]) -> tuple[Any, ...]:
    """An assistant turn as visible text and parsed tool calls (serialisation ignored)."""
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        arguments = fn.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments) if arguments else {}
        calls.append((fn.get("name"), json.dumps(arguments, sort_keys=True)))
    visible = message_text(message.get("content")).split("</think>")[-1].strip()
    return message.get("role"), visible, tuple(calls)


def clean_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message without None-valued or empty fields (`role` and `content` always kept)."""
    return {
        k: v
        for k, v in message.items()
        if k in ("role", "content") or (v is not None and v != [] and v != {})
    }


@dataclass
class _Conversation:
    trace: Trace
    prompt: list[dict[str, Any]]
    answer: dict[str, Any]
    tools: list[dict[str, Any]] | None
    keys: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.keys = [json.dumps(m, sort_keys=True, default=str) for m in self.prompt]

    def continued_by(self, other: _Conversation) -> bool:
        """Whether `other`'s prompt is this prompt followed by this same assistant turn."""
        n = len(self.keys)
        return (
            len(other.keys) > n
            and other.keys[:n] == self.keys
            and _turn_key(other.prompt[n]) == _turn_key(self.answer)
        )


def last_call(
    trace: Trace, records: RecordIndex | None
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]] | None] | None:
    """(request messages, answer, tools) of the trace's last call, or None when unknown.

    The answer is the trace's own (`trace.response_message`: the sampled choice
    the trace holds, so each choice of an `n > 1` call gives its own answer).
    """
    prov = trace.provenance
    last = (prov.session_id, prov.record_ids[-1]) if prov.record_ids else None
    record = records.get(last) if records is not None and last is not None else None
    if record is not None:
        answer = trace.response_message or response_message(record)
        if answer is None:
            return None
        request = record.normalized_request
        return list(request.get("messages") or []), clean_message(answer), request.get("tools")
    if len(prov.record_ids) == 1 and trace.response_message is not None:
        return list(trace.prompt_messages), clean_message(trace.response_message), trace.tools
    return None


def _conversation(trace: Trace, records: RecordIndex | None) -> _Conversation | None:
    """The conversation of the trace's last call, or None when it cannot be known."""
    call = last_call(trace, records)
    return None if call is None else _Conversation(trace, *call)


@dataclass
class SFTView:
    rows: list[dict[str, Any]]
    resolved_sessions: list[str]
    skipped: list[str] = field(default_factory=list)
    """trace ids of resolved sessions whose conversation is unknown (merged, no records)"""


def sft_rows(
    traces: Sequence[Trace],
    *,
    min_reward: float = 1.0,
    rewards: Mapping[str, float | None] | None = None,
    statuses: Collection[str] = (SessionStatus.COMPLETED.value,),
    records: RecordIndex | None = None,
) -> SFTView:
    """The SFT view of resolved sessions' traces (see the module docstring).

    `rewards`: each session's reward (default: recovered from the traces);
    `statuses`: the session statuses that count as resolved; `records`:
    CompletionRecords by (session id, record id) (`index_records`), needed
    for merged traces.
    """
    rewards = dict(session_rewards(traces)) | dict(rewards or {})
    by_session: dict[str, list[Trace]] = defaultdict(list)
    for trace in traces:
        by_session[trace.provenance.session_id].append(trace)
    view = SFTView(rows=[], resolved_sessions=[])
    for sid, group in by_session.items():
        reward = rewards.get(sid)
        status = group[0].status
        resolved = (
            reward is not None
            and math.isfinite(reward)
            and reward >= min_reward - REWARD_TOLERANCE
            and status is not None
            and status.value in statuses
        )
        if not resolved:
            continue
        view.resolved_sessions.append(sid)
        conversations = []
        for trace in group:
            conversation = _conversation(trace, records)
            if conversation is None:
                view.skipped.append(trace.trace_id)
            else:
                conversations.append(conversation)
        seen: set[str] = set()
        for conv in conversations:
            if any(conv.continued_by(other) for other in conversations if other is not conv):
                continue
            messages = [*conv.prompt, conv.answer]
            fingerprint = json.dumps([messages, conv.tools], sort_keys=True, default=str)
            if fingerprint in seen:
                continue
            seen.add(fingerprint)
            prov = conv.trace.provenance
            view.rows.append(
                {
                    "messages": messages,
                    "tools": conv.tools,
                    "trace_id": conv.trace.trace_id,
                    "session_id": sid,
                    "task_id": prov.task_id,
                    "harness": prov.harness,
                    "model": prov.model,
                    "reward": reward,
                }
            )
    return view

"""One entry per model call: a CompletionRecord's dict shaped for the session page.

Records are read as the gateway stored them (`polar.record_codec`); the upstream answer
is OpenAI-chat shaped (vLLM, SGLang), the request as sent is the caller's provider's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from polar.builders.base import unseen_records
from polar.message_text import content_text
from polar.records import CompletionRecord
from proxy.upstream_answers import context_overflow

PREVIEW_CHARS = 4000
LONG_LIST = 24
"""Lists of numbers longer than this are elided in the JSON shown (token ids, logprobs)."""


@dataclass
class CallEntry:
    """One model call as the session page lists it."""

    n: int
    record_id: str
    attempt: int
    provider: str
    model: str | None
    status_code: int
    error: str | None
    finish_reason: str | None
    latency_s: float
    started_at: float
    prompt_tokens: int
    response_tokens: int
    training: str
    last_message: str
    sent_last: str
    """The newest item of the request as the caller sent it (its provider's shape)."""
    gateway: str
    response_text: str
    tool_calls: list[str] = field(default_factory=list)
    normalized_changes: list[str] = field(default_factory=list)
    replica: str | None = None
    """The upstream replica that answered (or failed), without any credentials in its URL."""
    policy_version: int | None = None
    """The weight version the gateway served when it admitted the call (None: not named)."""


def clip(text: str, limit: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more chars]"


def last_message(request: dict[str, Any]) -> str:
    """The newest message of a chat request (what this call added to the conversation)."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return ""
    message = messages[-1]
    if not isinstance(message, dict):
        return clip(str(message))
    return clip(f"{message.get('role', '?')}: {content_text(message.get('content'))}")


def sent_last(request: Any) -> str:
    """The newest item of a request in any provider's shape: chat or Anthropic `messages`,
    Responses `input`, Gemini `contents`."""
    if not isinstance(request, dict):
        return ""
    for key in ("messages", "input", "contents"):
        items = request.get(key)
        if isinstance(items, str):
            return clip(f"user: {items}")
        if isinstance(items, list) and items:
            item = items[-1]
            if not isinstance(item, dict):
                return clip(str(item))
            role = item.get("role") or item.get("type") or "?"
            body = next((item[k] for k in ("content", "parts", "output") if k in item), item)
            return clip(f"{role}: {content_text(body)}")
    return ""


def answer_of(response: Any) -> tuple[str, list[str]]:
    """The answer's text (reasoning first, marked) and its tool calls, each as text."""
    if not isinstance(response, dict):
        return "", []
    choices = response.get("choices")
    message = choices[0].get("message") if isinstance(choices, list) and choices else None
    if not isinstance(message, dict):
        return "", []
    text = content_text(message.get("content"))
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        text = f"[reasoning] {reasoning}\n{text}"
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            calls.append(clip(f"{function.get('name')}({function.get('arguments')})"))
    return clip(text), calls


def training_status(
    record: dict[str, Any], trained_ids: set[str], unseen: dict[str, str] | None = None
) -> str:
    """What became of the call's sample: trained, or why not (`unseen`: the build's reasons
    for leaving records out, polar.builders.base.unseen_records)."""
    if record.get("client_disconnected"):
        return "client disconnected"
    if record.get("untrainable"):
        return f"untrainable: {record['untrainable']}"
    status = int(record.get("status_code") or 200)
    if record.get("error") or status >= 400:
        if status == 400 and context_overflow(str(record.get("error") or "")):
            return "context overflow"
        return "refused" if status < 500 else "failed"
    if record.get("record_id") in trained_ids:
        return "trained"
    if not record.get("response_token_ids"):
        return "no token ids"
    if (unseen or {}).get(str(record.get("record_id"))) == "resent":
        return "resent: its answer never reached the harness"
    return "unseen"


def unseen_reasons(records: list[dict[str, Any]], trained_ids: set[str]) -> dict[str, str]:
    """Why the build left records out, read only when a sampled call was not trained (the
    request digests it takes cost time on a long session)."""
    if all(r.get("record_id") in trained_ids or r.get("error") for r in records):
        return {}
    return dict(unseen_records([CompletionRecord.model_construct(**r) for r in records]))


def normalized_changes(record: dict[str, Any]) -> list[str]:
    """The fields the gateway's normalisation changed, added or dropped."""
    request, normalized = record.get("request") or {}, record.get("normalized_request") or {}
    if not isinstance(request, dict) or not isinstance(normalized, dict):
        return []
    changed = [f"~{k}" for k in normalized if k in request and request[k] != normalized[k]]
    added = [f"+{k}" for k in normalized if k not in request]
    dropped = [f"-{k}" for k in request if k not in normalized]
    return changed + added + dropped


def replica_of(url: Any) -> str | None:
    """A replica's URL as shown: scheme, host, port and path; never a user or password."""
    if not isinstance(url, str) or not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def call_entry(
    n: int, record: dict[str, Any], trained_ids: set[str], unseen: dict[str, str] | None = None
) -> CallEntry:
    """Entry `n` of the session page from one stored record's dict."""
    text, tools = answer_of(record.get("response"))
    started, finished = float(record.get("started_at", 0)), float(record.get("finished_at", 0))
    return CallEntry(
        n=n,
        record_id=str(record.get("record_id", "")),
        attempt=int(record.get("attempt", 1)),
        provider=str(record.get("provider", "")),
        model=record.get("model"),
        status_code=int(record.get("status_code") or 200),
        error=clip(str(record["error"])) if record.get("error") else None,
        finish_reason=record.get("finish_reason"),
        latency_s=max(0.0, finished - started),
        started_at=started,
        prompt_tokens=len(record.get("prompt_token_ids") or ()),
        response_tokens=len(record.get("response_token_ids") or ()),
        training=training_status(record, trained_ids, unseen),
        last_message=last_message(record.get("normalized_request") or {}),
        sent_last=sent_last(record.get("request")),
        gateway=str(record.get("gateway_id") or ""),
        response_text=text,
        tool_calls=tools,
        normalized_changes=normalized_changes(record),
        replica=replica_of(record.get("upstream_url")),
        policy_version=record.get("policy_version"),
    )


def elided(value: Any) -> Any:
    """`value` with long lists of numbers (token ids, logprobs) cut to their length."""
    if isinstance(value, dict):
        return {k: elided(v) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) > LONG_LIST and all(isinstance(v, int | float) for v in value):
            return [*value[:8], f"… {len(value) - 8} more numbers"]
        return [elided(v) for v in value]
    return value


def pretty(value: Any) -> str:
    """Indented JSON of `value`, long number lists elided."""
    return json.dumps(elided(value), indent=2, ensure_ascii=False, default=str)

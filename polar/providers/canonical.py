"""Canonical Chat Completions messages: the noise that defeats prefix merging, removed.

Harnesses re-send the same conversation with cosmetic differences from call
to call: content as a string in one call and as a list of text parts in the
next, a `cache_control` marker that moves, tool-call arguments re-serialised
compactly, Claude Code's per-session `x-anthropic-billing-header` system
line. The gateway sends upstream (and records as the normalised request) one
canonical form; the record keeps the original request as sent.

* content that is only text becomes one string, parts joined with "\\n" (what
  vLLM does with text parts); other parts stay a list, without cache markers;
* tool-call arguments that parse as JSON are re-serialised with `json.dumps`
  defaults (", " and ": ", non-ASCII kept), as vLLM's tool parsers write them;
* an assistant message with tool calls and no text has `content: null`;
* system text loses a leading `x-anthropic-billing-header:` line.
"""

from __future__ import annotations

import json
from typing import Any

BILLING_HEADER = "x-anthropic-billing-header:"
NOISE_KEYS = ("cache_control",)


def canonical_json(value: Any) -> str:
    """JSON text as vLLM writes tool-call arguments."""
    return json.dumps(value, ensure_ascii=False)


def canonical_arguments(arguments: Any) -> Any:
    """Tool-call arguments re-serialised canonically; text that is not JSON is kept as is."""
    if isinstance(arguments, dict | list):
        return canonical_json(arguments)
    if not isinstance(arguments, str):
        return arguments
    try:
        return canonical_json(json.loads(arguments))
    except ValueError:
        return arguments


def strip_billing_header(text: str) -> str | None:
    """`text` without a leading billing-header line; None if nothing else is left."""
    if not text.startswith(BILLING_HEADER):
        return text
    rest = text.partition("\n")[2]
    return rest or None


def _part_text(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
        text = part.get("text")
        return text if isinstance(text, str) else None
    return None


def canonical_content(content: Any, role: str | None = None) -> Any:
    """One canonical form of message content (see the module's rules)."""
    if isinstance(content, str):
        if role in ("system", "developer"):
            return strip_billing_header(content) or ""
        return content
    if not isinstance(content, list):
        return content
    parts: list[Any] = []
    for part in content:
        if isinstance(part, dict):
            part = {k: v for k, v in part.items() if k not in NOISE_KEYS}
        text = _part_text(part)
        if text is not None and role in ("system", "developer"):
            stripped = strip_billing_header(text)
            if stripped is None:
                continue
            part = stripped if isinstance(part, str) else part | {"text": stripped}
        parts.append(part)
    texts = [_part_text(p) for p in parts]
    if all(t is not None for t in texts):
        return "\n".join(t for t in texts if t is not None)
    return [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]


def canonical_tool_call(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    out = {k: v for k, v in call.items() if k not in NOISE_KEYS}
    function = out.get("function")
    if isinstance(function, dict) and "arguments" in function:
        out["function"] = function | {"arguments": canonical_arguments(function["arguments"])}
    return out


def canonical_message(message: Any) -> Any:
    """One message in canonical form (a copy; non-dicts are left for the upstream to judge)."""
    if not isinstance(message, dict):
        return message
    out = {k: v for k, v in message.items() if k not in NOISE_KEYS}
    role = out.get("role")
    if "content" in out:
        out["content"] = canonical_content(out["content"], role if isinstance(role, str) else None)
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [canonical_tool_call(c) for c in calls]
        if calls and out.get("content") in ("", []):
            out["content"] = None
    return out


def canonical_messages(messages: list[Any]) -> list[Any]:
    return [canonical_message(m) for m in messages]

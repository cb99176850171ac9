"""A synthetic Chat Completions SSE stream rendered from one non-streaming answer.

The gateway always calls upstream without streaming (it needs the whole
answer, token ids and all, recorded before the caller sees anything); a
caller that asked to stream gets the answer replayed as the exact chunk
sequence OpenAI's SDKs expect:

    role chunk -> reasoning deltas -> content deltas -> tool_call deltas
    (id, type, name, then argument pieces) -> finish_reason chunk
    -> usage chunk (if `stream_options.include_usage`) -> `data: [DONE]`
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

PIECES = 4
REASONING_KEYS = ("reasoning_content", "reasoning")


def split_text(text: str, pieces: int = PIECES) -> list[str]:
    """`text` in up to `pieces` non-empty consecutive parts."""
    if not text:
        return []
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def sse(data: dict[str, Any] | str) -> str:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n"


def _choice_deltas(choice: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The deltas of one choice, from its role to its last tool-call argument piece."""
    message = choice.get("message") or {}
    yield {"role": message.get("role") or "assistant", "content": ""}
    for key in REASONING_KEYS:
        reasoning = message.get(key)
        if isinstance(reasoning, str):
            for piece in split_text(reasoning):
                yield {key: piece}
    content = message.get("content")
    if isinstance(content, str):
        for piece in split_text(content):
            yield {"content": piece}
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        yield {"refusal": message["refusal"]}
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        yield {
            "tool_calls": [
                {
                    "index": index,
                    "id": call.get("id"),
                    "type": call.get("type") or "function",
                    "function": {"name": function.get("name") or "", "arguments": ""},
                }
            ]
        }
        for piece in split_text(function.get("arguments") or ""):
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


def render_chat_stream(answer: dict[str, Any], include_usage: bool = False) -> Iterator[str]:
    """SSE `data:` events of `chat.completion.chunk`s replaying `answer`, then `[DONE]`."""
    base: dict[str, Any] = {
        "id": answer.get("id") or "chatcmpl-polar",
        "object": "chat.completion.chunk",
        "created": answer.get("created") or int(time.time()),
        "model": answer.get("model") or "",
    }
    if answer.get("system_fingerprint") is not None:
        base["system_fingerprint"] = answer["system_fingerprint"]
    if include_usage:
        base["usage"] = None

    def chunk(index: int, delta: dict[str, Any], **extra: Any) -> str:
        return sse(
            base
            | {"choices": [{"index": index, "delta": delta, "logprobs": None,
                            "finish_reason": None} | extra]}
        )

    for position, choice in enumerate(answer.get("choices") or []):
        index = choice.get("index", position)
        for delta in _choice_deltas(choice):
            yield chunk(index, delta)
        yield chunk(
            index, {}, finish_reason=choice.get("finish_reason") or "stop",
            logprobs=choice.get("logprobs"),
        )
    if include_usage:
        usage = answer.get("usage") or {"prompt_tokens": 0, "completion_tokens": 0,
                                        "total_tokens": 0}
        yield sse(base | {"choices": [], "usage": usage})
    yield sse("[DONE]")

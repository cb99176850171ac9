"""OpenAI Chat Completions (`POST /v1/chat/completions`): the shape the upstream speaks.

Normalising is validation plus canonical messages (`canonical.py`); the
answer goes back as the upstream gave it (training fields already stripped
by the gateway). A streaming caller gets the answer replayed as the exact
chunk sequence OpenAI's SDKs expect:

    role chunk -> reasoning deltas -> content deltas -> tool_call deltas
    (id, type, name, then argument pieces) -> finish_reason chunk
    -> usage chunk (if `stream_options.include_usage`) -> `data: [DONE]`

Errors are `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from polar.providers.base import (
    REASONING_KEYS,
    APIError,
    CallContext,
    ProviderAPI,
    malformed_is_400,
    now,
    split_text,
    sse,
)
from polar.providers.canonical import canonical_messages
from polar.providers.request_models import check_chat


def default_type(status_code: int) -> str:
    """OpenAI's error `type` for a status: client errors are `invalid_request_error`."""
    if status_code == 429:
        return "rate_limit_error"
    return "invalid_request_error" if status_code < 500 else "server_error"


def error_body(
    message: str, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


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
        "created": answer.get("created") or now(),
        "model": answer.get("model") or "",
    }
    if answer.get("system_fingerprint") is not None:
        base["system_fingerprint"] = answer["system_fingerprint"]
    if include_usage:
        base["usage"] = None

    def chunk(index: int, delta: dict[str, Any], **extra: Any) -> str:
        return sse(
            base
            | {
                "choices": [
                    {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
                    | extra
                ]
            }
        )

    for position, choice in enumerate(answer.get("choices") or []):
        index = choice.get("index", position)
        for delta in _choice_deltas(choice):
            yield chunk(index, delta)
        yield chunk(
            index,
            {},
            finish_reason=choice.get("finish_reason") or "stop",
            logprobs=choice.get("logprobs"),
        )
    if include_usage:
        usage = answer.get("usage") or {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
        }
        yield sse(base | {"choices": [], "usage": usage})
    yield sse("[DONE]")


class OpenAIChat(ProviderAPI):
    """OpenAI Chat Completions: normalised in place, answered as the upstream answered."""

    name = "openai_chat"

    def detect(self, path: str, headers: Mapping[str, str]) -> bool:
        return path.rstrip("/").endswith("/chat/completions")

    @malformed_is_400
    def to_chat(self, request: dict[str, Any], call: CallContext) -> dict[str, Any]:
        messages = check_chat(request)["messages"]  # the API's 400s: fields, roles, content
        if not messages:
            raise APIError(
                400,
                "'messages' must be a non-empty array.",
                param="messages",
                code="invalid_type",
            )
        return request | {"messages": canonical_messages(messages)}

    def from_chat(
        self, answer: dict[str, Any], request: dict[str, Any], call: CallContext
    ) -> dict[str, Any]:
        return answer

    def stream_events(
        self, answer: dict[str, Any], request: dict[str, Any], call: CallContext
    ) -> Iterator[str]:
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        return render_chat_stream(answer, include_usage)

    def error_body(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
    ) -> dict[str, Any]:
        return error_body(message, type or default_type(status), param, code)

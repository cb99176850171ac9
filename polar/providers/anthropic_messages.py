"""Anthropic Messages (`POST /v1/messages`, `?beta=true`), as Claude Code speaks it.

Request: `system` (a string or text blocks) and `role: "system"` messages
inside `messages` become system messages; `text`, `image`, `thinking`
(-> `reasoning_content`), `tool_use` (-> `tool_calls`) and `tool_result`
(-> `tool` messages, content a string or text/image blocks) blocks are
mapped; `cache_control` markers and the billing-header system line are
noise and dropped (`canonical.py`). `stop_sequences` -> `stop`,
`tool_choice` auto/any/tool/none, `max_tokens`, `temperature`, `top_p`,
`top_k`. A final assistant message is a prefill: the upstream continues it.
A `tool_result`'s `is_error` has no Chat counterpart: its content goes as is.
Server tools (`web_search_*`, `bash_*`, ...) cannot be served and are dropped.
`thinking`, `metadata`, `context_management` and `output_config` are accepted
and not sent upstream.

Answer: a `message` with thinking / text / tool_use blocks and the matching
`stop_reason`; a streaming caller gets `message_start`, `ping`, per block
`content_block_start`, its deltas (`text_delta`, `thinking_delta` then
`signature_delta`, `input_json_delta`) and `content_block_stop`, then
`message_delta` (stop reason, usage) and `message_stop`. Errors are
`{"type": "error", "error": {"type", "message"}}`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from polar.providers.base import (
    CallContext,
    ContextOverflow,
    ProviderAPI,
    answer_message,
    arr,
    bad_request,
    dict_at,
    first_choice,
    malformed_is_400,
    new_id,
    parse_arguments,
    reasoning_of,
    split_text,
    sse,
    usage_of,
)
from polar.providers.canonical import canonical_json, canonical_messages
from polar.providers.request_models import check_anthropic

log = logging.getLogger("polar.providers")

SIGNATURE = "polar-unsigned"  # thinking blocks need one; ours vouch for nothing
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}


# --------------------------------------------------------------------------- request


def _image_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    source = dict_at(block, "source")
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise bad_request(f"{where}: unsupported image source", param=where)
    return {"type": "image_url", "image_url": {"url": url}}


def _user_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return {"type": "text", "text": block["text"]}
    if kind == "image":
        return _image_part(block, where)
    source = dict_at(block, "source")
    if kind == "document" and source.get("type") == "text":
        return {"type": "text", "text": str(source.get("data") or "")}
    raise bad_request(
        f"{where}: content block {kind!r} is not supported by this gateway", param=where
    )


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise bad_request(f"{where}.content must be a string or an array of blocks", param=where)
    return content


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    content = block.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        content = [_user_part(b, where) for b in _blocks(content, where)]
    return {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": content}


def _user(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(_blocks(content, where)):
        if block.get("type") == "tool_result":
            results.append(_tool_result(block, f"{where}.content[{j}]"))
        else:
            parts.append(_user_part(block, f"{where}.content[{j}]"))
    return results + ([{"role": "user", "content": parts}] if parts else [])


def _assistant(content: Any, where: str) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(_blocks(content, where)):
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "thinking":
            thoughts.append(str(block.get("thinking") or ""))
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {
                        "name": block.get("name"),
                        "arguments": canonical_json(block.get("input") or {}),
                    },
                }
            )
        else:
            raise bad_request(
                f"{where}.content[{j}]: block {kind!r} is not supported by this gateway",
                param=where,
            )
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Chat messages for a Messages request's `system` and `messages`."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages: field required (a non-empty array)", param="messages")
    out: list[dict[str, Any]] = []
    system = request.get("system")
    if system:
        out.append({"role": "system", "content": _blocks(system, "system")})
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad_request(f"{where} must be an object", param=where)
        role, content = message.get("role"), message.get("content")
        if role == "user":
            out.extend(_user(content, where))
        elif role == "assistant":
            out.append(_assistant(content, where))
        elif role == "system":
            out.append(
                {
                    "role": "system",
                    "content": [_user_part(b, where) for b in _blocks(content, where)],
                }
            )
        else:
            raise bad_request(f"{where}.role: unknown role {role!r}", param=where)
    return out


def map_tools(tools: Any) -> list[dict[str, Any]]:
    """Chat tools for client tools; server tools (typed, e.g. `web_search_20250305`) dropped."""
    out: list[dict[str, Any]] = []
    dropped: list[str] = []
    for tool in arr(tools, "tools"):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise bad_request("each tool needs a 'name'", param="tools")
        if tool.get("type") not in (None, "custom"):
            dropped.append(f"{tool['name']} ({tool['type']})")
            continue
        function: dict[str, Any] = {"name": tool["name"]}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        schema = tool.get("input_schema")
        function["parameters"] = schema if isinstance(schema, dict) else {"type": "object"}
        out.append({"type": "function", "function": function})
    if dropped:
        log.info("messages: dropped server tools the upstream cannot serve: %s", dropped)
    return out


def map_tool_choice(choice: Any) -> tuple[Any, bool | None]:
    """(Chat tool_choice, parallel_tool_calls) for an Anthropic tool_choice."""
    if not isinstance(choice, dict):
        return None, None
    parallel = False if choice.get("disable_parallel_tool_use") else None
    kind = choice.get("type")
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", None
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise bad_request(f"tool_choice: unsupported type {kind!r}", param="tool_choice")


# --------------------------------------------------------------------------- answer


def content_blocks(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """Thinking, text and tool_use blocks for a Chat Completions answer."""
    message = answer_message(answer)
    blocks: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": SIGNATURE})
    text = message.get("content") if isinstance(message.get("content"), str) else ""
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if text or not calls:
        blocks.append({"type": "text", "text": text})
    for call in calls:
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id") or new_id("toolu_"),
                "name": function.get("name") or "",
                "input": parse_arguments(function.get("arguments")),
            }
        )
    return blocks


def stop_of(answer: dict[str, Any], request: dict[str, Any]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of an answer."""
    choice = first_choice(answer)
    if answer_message(answer).get("tool_calls"):
        return "tool_use", None
    matched = choice.get("stop_reason")
    sequences = request.get("stop_sequences") or []
    if choice.get("finish_reason") == "stop" and isinstance(matched, str) and matched in sequences:
        return "stop_sequence", matched
    return STOP_REASONS.get(str(choice.get("finish_reason")), "end_turn"), None


def message_object(
    answer: dict[str, Any],
    request: dict[str, Any],
    content: list[dict[str, Any]],
    *,
    stop: tuple[str | None, str | None],
    message_id: str,
) -> dict[str, Any]:
    prompt, completion = usage_of(answer)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": request.get("model") or answer.get("model") or "",
        "content": content,
        "stop_reason": stop[0],
        "stop_sequence": stop[1],
        "usage": {
            "input_tokens": prompt,
            "output_tokens": completion,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _block_events(index: int, block: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    kind = block["type"]
    at = {"index": index}
    if kind == "text":
        yield "content_block_start", at | {"content_block": {"type": "text", "text": ""}}
        for piece in split_text(block["text"]):
            yield "content_block_delta", at | {"delta": {"type": "text_delta", "text": piece}}
    elif kind == "thinking":
        yield (
            "content_block_start",
            at | {"content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        )
        for piece in split_text(block["thinking"]):
            yield (
                "content_block_delta",
                at | {"delta": {"type": "thinking_delta", "thinking": piece}},
            )
        yield (
            "content_block_delta",
            at | {"delta": {"type": "signature_delta", "signature": block["signature"]}},
        )
    else:
        yield "content_block_start", at | {"content_block": block | {"input": {}}}
        for piece in split_text(canonical_json(block["input"])):
            yield (
                "content_block_delta",
                at | {"delta": {"type": "input_json_delta", "partial_json": piece}},
            )
    yield "content_block_stop", at


class AnthropicMessages(ProviderAPI):
    """Anthropic Messages over Chat Completions (see the module)."""

    name = "anthropic_messages"

    def detect(self, path: str, headers: Mapping[str, str]) -> bool:
        stripped = path.rstrip("/")
        if stripped.endswith("/messages") or stripped.endswith("/messages/count_tokens"):
            return True
        listing = stripped.endswith("/models") or "/models/" in stripped
        return listing and "anthropic-version" in {k.lower() for k in headers}

    @malformed_is_400
    def to_chat(self, request: dict[str, Any], call: CallContext) -> dict[str, Any]:
        request = check_anthropic(request, call)  # the API's 400s: max_tokens, roles, blocks
        messages = canonical_messages(chat_messages(request))
        if not messages:
            raise bad_request("messages: no message has any content", param="messages")
        chat: dict[str, Any] = {"messages": messages}
        if isinstance(request.get("model"), str):
            chat["model"] = request["model"]
        tools = map_tools(request.get("tools"))
        if tools:
            chat["tools"] = tools
            choice, parallel = map_tool_choice(request.get("tool_choice"))
            if choice is not None:
                chat["tool_choice"] = choice
            if parallel is not None:
                chat["parallel_tool_calls"] = parallel
        if isinstance(request.get("max_tokens"), int):
            chat["max_tokens"] = request["max_tokens"]
        for key in ("temperature", "top_p", "top_k"):
            if isinstance(request.get(key), int | float) and not isinstance(request[key], bool):
                chat[key] = request[key]
        stops = request.get("stop_sequences")
        if stops:
            chat["stop"] = [s for s in arr(stops, "stop_sequences") if isinstance(s, str)]
        if messages[-1].get("role") == "assistant" and not messages[-1].get("tool_calls"):
            chat["continue_final_message"] = True  # a prefill: continue it, no new turn
            chat["add_generation_prompt"] = False
        return chat

    def from_chat(
        self, answer: dict[str, Any], request: dict[str, Any], call: CallContext
    ) -> dict[str, Any]:
        return message_object(
            answer,
            request,
            content_blocks(answer),
            stop=stop_of(answer, request),
            message_id=new_id("msg_"),
        )

    def stream_events(
        self, answer: dict[str, Any], request: dict[str, Any], call: CallContext
    ) -> Iterator[str]:
        blocks = content_blocks(answer)
        stop_reason, stop_sequence = stop_of(answer, request)
        start = message_object(answer, request, [], stop=(None, None), message_id=new_id("msg_"))
        start["usage"]["output_tokens"] = 0
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"message": start}),
            ("ping", {}),
        ]
        for index, block in enumerate(blocks):
            events.extend(_block_events(index, block))
        _, completion = usage_of(answer)
        events.append(
            (
                "message_delta",
                {
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                    "usage": {"output_tokens": completion},
                },
            )
        )
        events.append(("message_stop", {}))
        for kind, payload in events:
            yield sse({"type": kind} | payload, event=kind)

    def error_body(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
    ) -> dict[str, Any]:
        kind = ERROR_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def overflow_error(self, overflow: ContextOverflow) -> tuple[int, dict[str, Any]]:
        """Anthropic's own words, which Claude Code reads to offer or run a compaction."""
        message = f"prompt is too long: {overflow.tokens} tokens > {overflow.limit} maximum"
        return 400, self.error_body(400, message)

    def model_list(self, names: list[str], context_window: int | None = None) -> dict[str, Any]:
        cards = [self.model_card(n, context_window) for n in names]
        return {
            "data": cards,
            "has_more": False,
            "first_id": names[0] if names else None,
            "last_id": names[-1] if names else None,
        }

    def model_card(self, name: str, context_window: int | None = None) -> dict[str, Any]:
        card: dict[str, Any] = {
            "type": "model",
            "id": name,
            "display_name": name,
            "created_at": "2025-01-01T00:00:00Z",
        }
        if context_window is not None:  # the Models API's limits (input, and output at most)
            card["max_input_tokens"] = card["max_tokens"] = context_window
        return card

    def token_count(self, count: int, approximate: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"input_tokens": count}
        if approximate:
            out["approximate"] = True
        return out

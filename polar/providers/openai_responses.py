"""OpenAI Responses (`POST /v1/responses`), as Codex CLI speaks it, over Chat Completions.

Request: `instructions` and `system`/`developer` items become system
messages; `input` (a string or items) becomes the conversation. One
assistant turn of the Responses API is several items (reasoning, message,
function calls): consecutive ones are joined back into one assistant message
(`reasoning_content`, `content`, `tool_calls`), so a turn renders exactly as
the template rendered the sampled answer. `function_call_output` items
become `tool` messages. `store`, `include`, `prompt_cache_key`,
`client_metadata` and the like are accepted and not sent upstream;
`previous_response_id` and `conversation` need server-side state and are
refused with a 400.

Tools: functions as they are; `namespace` tools flattened to functions named
`{namespace}__{name}` (and calls to them mapped back, with `namespace`);
freeform `custom` tools as functions with one string parameter `input`
(calls mapped back to `custom_tool_call`). Hosted tools (`web_search`,
`file_search`, ...) cannot be served by a local model: they are dropped and
logged, and a `tool_choice` that forces one is a 400.

Answer: a `response` object with reasoning / message / function-call items;
a streaming caller gets `response.created`, `response.in_progress`, per item
`output_item.added`, its parts and deltas, `output_item.done`, and then
`response.completed` (`response.incomplete` when cut by length), each with a
`sequence_number`. Errors are OpenAI-shaped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from polar.providers.base import (
    CONTEXT_CODE,
    APIError,
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
    now,
    obj,
    parse_arguments,
    reasoning_of,
    require_object,
    split_text,
    sse,
    str_at,
    usage_of,
)
from polar.providers.canonical import canonical_arguments, canonical_json, canonical_messages
from polar.providers.openai_chat import default_type, error_body

log = logging.getLogger("polar.providers")

NAMESPACE_SEP = "__"
TEXT_PARTS = ("input_text", "output_text", "text")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


# --------------------------------------------------------------------------- tools


@dataclass
class ToolMap:
    """The Chat tools serving a request's tools, and how to name calls back."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)  # flat -> (ns, name)
    custom: set[str] = field(default_factory=set)  # flat names of freeform tools
    dropped: list[str] = field(default_factory=list)


def _function(name: str, description: Any, parameters: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if isinstance(description, str) and description:
        function["description"] = description
    function["parameters"] = (
        parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    )
    return {"type": "function", "function": function}


def _custom_function(name: str, tool: dict[str, Any]) -> dict[str, Any]:
    description = str_at(tool, "description")
    fmt = dict_at(tool, "format")
    if fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        description += f"\n\nInput grammar ({fmt.get('syntax') or 'grammar'}):\n{fmt['definition']}"
    parameters = {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "the raw tool input"}},
        "required": ["input"],
    }
    return _function(name, description.strip(), parameters)


def map_tools(tools: Any, *, note: bool = True) -> ToolMap:
    """Chat tools for Responses `tools`; hosted tools dropped (listed in `dropped`, logged)."""
    out = ToolMap()
    if tools is None:
        return out
    if not isinstance(tools, list):
        raise bad_request("'tools' must be an array", param="tools")

    def add(tool: dict[str, Any], namespace: str | None) -> None:
        kind, name = tool.get("type"), tool.get("name")
        if kind not in ("function", "custom") or not isinstance(name, str) or not name:
            out.dropped.append(str(name or kind))
            return
        flat = f"{namespace}{NAMESPACE_SEP}{name}" if namespace else name
        if kind == "function":
            out.tools.append(_function(flat, tool.get("description"), tool.get("parameters")))
        else:
            out.tools.append(_custom_function(flat, tool))
            out.custom.add(flat)
        if namespace:
            out.namespaced[flat] = (namespace, name)

    for tool in tools:
        if not isinstance(tool, dict):
            raise bad_request("each tool must be an object", param="tools")
        if tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
            for inner in arr(tool.get("tools"), "tools[].tools"):
                if isinstance(inner, dict):
                    add(inner, tool["name"])
        elif tool.get("type") in ("function", "custom"):
            add(tool, None)
        else:
            out.dropped.append(str(tool.get("type")))
    if out.dropped and note:
        log.info("responses: dropped tools the upstream cannot serve: %s", out.dropped)
    return out


def map_tool_choice(choice: Any, tools: ToolMap) -> Any:
    """Chat `tool_choice` for a Responses one (None: unset); forcing a hosted tool is a 400."""
    if isinstance(choice, dict) and choice.get("type") not in (
        "function",
        "custom",
        "allowed_tools",
    ):
        raise bad_request(
            f"tool_choice forces the hosted tool {choice.get('type')!r}, "
            "which this gateway cannot serve",
            param="tool_choice",
            code="unsupported_tool",
        )
    if choice is None or not tools.tools:
        return None
    if choice in ("auto", "none", "required"):
        return choice
    if not isinstance(choice, dict):
        raise bad_request(f"unsupported tool_choice {choice!r}", param="tool_choice")
    if choice.get("type") == "allowed_tools":
        return "required" if choice.get("mode") == "required" else "auto"
    if not isinstance(choice.get("name"), str):
        raise bad_request("tool_choice needs the tool's 'name'", param="tool_choice")
    return {"type": "function", "function": {"name": choice["name"]}}


# --------------------------------------------------------------------------- input


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict):
            if part.get("type") in TEXT_PARTS and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                texts.append(part["refusal"])
    return "\n".join(texts)


def _parts(content: Any, where: str) -> Any:
    """Chat content for Responses input content (string, or text and image parts)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where}.content must be a string or an array", param=where)
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            image = {"url": part["image_url"]}
            if part.get("detail"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise bad_request(
                f"{where}: content part {kind!r} is not supported by this gateway",
                param=where,
                code="unsupported_content",
            )
    return parts


def _reasoning_text(item: dict[str, Any], where: str) -> str:
    """The reasoning text of a reasoning item: its content, else its summary."""
    for key in ("content", "summary"):
        parts = arr(item.get(key), f"{where}.{key}")
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if texts:
            return "".join(texts)
    return ""


class _Conversation:
    """Chat messages built item by item; one assistant turn gathers consecutive items."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.turn: dict[str, Any] | None = None

    def close(self) -> None:
        if self.turn is not None:
            self.messages.append(self.turn)
            self.turn = None

    def add(self, message: dict[str, Any]) -> None:
        self.close()
        self.messages.append(message)

    def assistant(self, *, starts_with: str) -> dict[str, Any]:
        """The open assistant turn, or a new one if `starts_with` cannot join it."""
        turn = self.turn
        if turn is not None:
            blocked_by = (
                ("content", "tool_calls")
                if starts_with == "reasoning"
                else (("tool_calls",) if starts_with == "text" else ())
            )
            if any(turn.get(key) for key in blocked_by):
                self.close()
        if self.turn is None:
            self.turn = {"role": "assistant", "content": None}
        return self.turn


def _tool_call(call_id: Any, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": canonical_arguments(arguments)},
    }


def input_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Chat messages for a request's `instructions` and `input`."""
    conv = _Conversation()
    instructions = request.get("instructions")
    if isinstance(instructions, str) and instructions:
        conv.add({"role": "system", "content": instructions})
    items = request.get("input")
    if isinstance(items, str):
        conv.add({"role": "user", "content": items})
        return conv.messages
    if not isinstance(items, list):
        raise bad_request(
            "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
        )
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object", param=where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role == "assistant":
                turn = conv.assistant(starts_with="text")
                text = _text_of(item.get("content"))
                turn["content"] = f"{turn['content']}\n{text}" if turn["content"] else text
            elif role in ("user", "system", "developer"):
                chat_role = "user" if role == "user" else "system"
                conv.add({"role": chat_role, "content": _parts(item.get("content"), where)})
            else:
                raise bad_request(f"{where}: unknown role {role!r}", param=where)
        elif kind == "reasoning":
            text = _reasoning_text(item, where)
            if text:
                turn = conv.assistant(starts_with="reasoning")
                turn["reasoning_content"] = (turn.get("reasoning_content") or "") + text
        elif kind in ("function_call", "custom_tool_call"):
            name = item.get("name")
            if not isinstance(name, str):
                raise bad_request(f"{where}.name must be a string", param=where)
            if isinstance(item.get("namespace"), str) and item["namespace"]:
                name = f"{item['namespace']}{NAMESPACE_SEP}{name}"
            arguments = (
                item.get("arguments")
                if kind == "function_call"
                else canonical_json({"input": item.get("input") or ""})
            )
            turn = conv.assistant(starts_with="call")
            turn.setdefault("tool_calls", []).append(
                _tool_call(item.get("call_id"), name, arguments)
            )
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            content = (
                _parts(output, where)
                if isinstance(output, list)
                else (output if isinstance(output, str) else canonical_json(output))
            )
            conv.add({"role": "tool", "tool_call_id": item.get("call_id"), "content": content})
        else:
            raise bad_request(
                f"{where}: input item type {kind!r} is not supported by this gateway",
                param=where,
                code="unsupported_input_item",
            )
    conv.close()
    return conv.messages


# --------------------------------------------------------------------------- output


def output_items(answer: dict[str, Any], request: dict[str, Any]) -> list[dict[str, Any]]:
    """The Responses output items (completed) for a Chat Completions answer."""
    message = answer_message(answer)
    tools = map_tools(request.get("tools"), note=False)
    items: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": new_id("rs_"),
                "summary": [],
                "content": [{"type": "reasoning_text", "text": reasoning}],
                "encrypted_content": None,
                "status": "completed",
            }
        )
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    if content or not calls:
        items.append(
            {
                "type": "message",
                "id": new_id("msg_"),
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": content, "annotations": [], "logprobs": []}
                ],
            }
        )
    for call in calls:
        function = call.get("function") or {}
        flat = str(function.get("name") or "")
        arguments = function.get("arguments") if isinstance(function.get("arguments"), str) else ""
        namespace, name = tools.namespaced.get(flat, (None, flat))
        item: dict[str, Any]
        if flat in tools.custom:
            raw = parse_arguments(arguments).get("input")
            item = {
                "type": "custom_tool_call",
                "id": new_id("ctc_"),
                "call_id": call.get("id") or new_id("call_"),
                "name": name,
                "input": raw if isinstance(raw, str) else arguments,
                "status": "completed",
            }
        else:
            item = {
                "type": "function_call",
                "id": new_id("fc_"),
                "call_id": call.get("id") or new_id("call_"),
                "name": name,
                "arguments": arguments,
                "status": "completed",
            }
        if namespace:
            item["namespace"] = namespace
        items.append(item)
    return items


def response_object(
    answer: dict[str, Any],
    request: dict[str, Any],
    output: list[dict[str, Any]],
    *,
    status: str,
    response_id: str,
) -> dict[str, Any]:
    """A `response` object echoing the request's settings, with `output` and usage."""
    prompt, completion = usage_of(answer)
    done = status in ("completed", "incomplete")
    return {
        "id": response_id,
        "object": "response",
        "created_at": answer.get("created") or now(),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": request.get("model") or answer.get("model") or "",
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
        "store": request.get("store", True),
        "temperature": request.get("temperature"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p"),
        "truncation": request.get("truncation", "disabled"),
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        }
        if done
        else None,
        "metadata": request.get("metadata") or {},
    }


def _status(answer: dict[str, Any]) -> str:
    return "incomplete" if first_choice(answer).get("finish_reason") == "length" else "completed"


def _item_events(index: int, item: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(type, payload) of the events that stream one output item."""
    at = {"item_id": item["id"], "output_index": index}
    kind = item["type"]
    if kind in ("message", "reasoning"):
        yield (
            "response.output_item.added",
            {"output_index": index, "item": item | {"status": "in_progress", "content": []}},
        )
        part = item["content"][0]
        text = part["text"]
        delta_type = "output_text" if kind == "message" else "reasoning_text"
        extra: dict[str, list[Any]] = {"logprobs": []} if kind == "message" else {}
        yield "response.content_part.added", at | {"content_index": 0, "part": part | {"text": ""}}
        for piece in split_text(text):
            yield f"response.{delta_type}.delta", at | {"content_index": 0, "delta": piece} | extra
        yield f"response.{delta_type}.done", at | {"content_index": 0, "text": text} | extra
        yield "response.content_part.done", at | {"content_index": 0, "part": part}
    elif kind == "function_call":
        yield (
            "response.output_item.added",
            {"output_index": index, "item": item | {"status": "in_progress", "arguments": ""}},
        )
        for piece in split_text(item["arguments"]):
            yield "response.function_call_arguments.delta", at | {"delta": piece}
        yield (
            "response.function_call_arguments.done",
            at | {"arguments": item["arguments"], "name": item["name"]},
        )
    elif kind == "custom_tool_call":
        yield (
            "response.output_item.added",
            {"output_index": index, "item": item | {"status": "in_progress", "input": ""}},
        )
        for piece in split_text(item["input"]):
            yield "response.custom_tool_call_input.delta", at | {"delta": piece}
        yield "response.custom_tool_call_input.done", at | {"input": item["input"]}
    yield "response.output_item.done", {"output_index": index, "item": item}


class OpenAIResponses(ProviderAPI):
    """OpenAI Responses over Chat Completions (see the module)."""

    name = "openai_responses"

    def detect(self, path: str, headers: Mapping[str, str]) -> bool:
        stripped = path.rstrip("/")
        return stripped.endswith("/responses") or "/responses/" in stripped

    @malformed_is_400
    def to_chat(self, request: dict[str, Any], call: CallContext) -> dict[str, Any]:
        request = require_object(request)
        for stateful in ("previous_response_id", "conversation"):
            if request.get(stateful):
                raise bad_request(
                    f"'{stateful}' needs server-side state, which this gateway does not keep: "
                    "send the whole conversation in 'input' (store: false)",
                    param=stateful,
                    code="unsupported_parameter",
                )
        tools = map_tools(request.get("tools"))
        chat: dict[str, Any] = {"messages": canonical_messages(input_messages(request))}
        if not chat["messages"]:
            raise bad_request("'input' must not be empty", param="input")
        if isinstance(request.get("model"), str):
            chat["model"] = request["model"]
        choice = map_tool_choice(request.get("tool_choice"), tools)
        if tools.tools:
            chat["tools"] = tools.tools
            if choice is not None:
                chat["tool_choice"] = choice
            if isinstance(request.get("parallel_tool_calls"), bool):
                chat["parallel_tool_calls"] = request["parallel_tool_calls"]
        if isinstance(request.get("max_output_tokens"), int):
            chat["max_tokens"] = request["max_output_tokens"]
        for key in ("temperature", "top_p"):
            if isinstance(request.get(key), int | float) and not isinstance(request[key], bool):
                chat[key] = request[key]
        effort = obj(request.get("reasoning"), "reasoning").get("effort")
        if effort in EFFORTS:
            chat["reasoning_effort"] = effort
        fmt = obj(obj(request.get("text"), "text").get("format"), "text.format")
        if fmt.get("type") == "json_schema":
            schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
            chat["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif fmt.get("type") == "json_object":
            chat["response_format"] = {"type": "json_object"}
        return chat

    def from_chat(
        self, answer: dict[str, Any], request: dict[str, Any], call: CallContext
    ) -> dict[str, Any]:
        return response_object(
            answer,
            request,
            output_items(answer, request),
            status=_status(answer),
            response_id=new_id("resp_"),
        )

    def stream_events(
        self, answer: dict[str, Any], request: dict[str, Any], call: CallContext
    ) -> Iterator[str]:
        output = output_items(answer, request)
        response_id = new_id("resp_")
        status = _status(answer)
        start = response_object(answer, request, [], status="in_progress", response_id=response_id)
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"response": start}),
            ("response.in_progress", {"response": start}),
        ]
        for index, item in enumerate(output):
            events.extend(_item_events(index, item))
        final = response_object(answer, request, output, status=status, response_id=response_id)
        events.append((f"response.{status}", {"response": final}))
        for seq, (kind, payload) in enumerate(events):
            yield sse({"type": kind, "sequence_number": seq} | payload, event=kind)

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

    def overflow_error(self, overflow: ContextOverflow) -> tuple[int, dict[str, Any]]:
        """The Responses API's words and code (Codex CLI reads the code)."""
        message = (
            "Your input exceeds the context window of this model. Please adjust your input "
            f"and try again. ({overflow.tokens} tokens > {overflow.limit} maximum)"
        )
        body = error_body(message, "invalid_request_error", "input", CONTEXT_CODE)
        return 400, body


__all__ = ["APIError", "OpenAIResponses", "input_messages", "map_tools", "output_items"]

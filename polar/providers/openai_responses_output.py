"""Chat Completions answers as OpenAI Responses: output items, the response object, item events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from polar.providers.base import (
    answer_message,
    first_choice,
    new_id,
    now,
    parse_arguments,
    reasoning_of,
    split_text,
    usage_of,
)
from polar.providers.openai_responses_input import map_tools

__all__ = ["answer_status", "item_events", "output_items", "response_object"]


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


def answer_status(answer: dict[str, Any]) -> str:
    return "incomplete" if first_choice(answer).get("finish_reason") == "length" else "completed"


def item_events(index: int, item: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
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

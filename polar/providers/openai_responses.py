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

The request is mapped in openai_responses_input.py, the answer in
openai_responses_output.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from polar.providers.base import (
    CONTEXT_CODE,
    APIError,
    CallContext,
    ContextOverflow,
    ProviderAPI,
    bad_request,
    malformed_is_400,
    new_id,
    obj,
    sse,
)
from polar.providers.canonical import canonical_messages
from polar.providers.openai_chat import default_type, error_body
from polar.providers.openai_responses_input import input_messages, map_tool_choice, map_tools
from polar.providers.openai_responses_output import (
    answer_status,
    item_events,
    output_items,
    response_object,
)
from polar.providers.request_models import check_responses

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


class OpenAIResponses(ProviderAPI):
    """OpenAI Responses over Chat Completions (see the module)."""

    name = "openai_responses"

    def detect(self, path: str, headers: Mapping[str, str]) -> bool:
        stripped = path.rstrip("/")
        return stripped.endswith("/responses") or "/responses/" in stripped

    @malformed_is_400
    def to_chat(self, request: dict[str, Any], call: CallContext) -> dict[str, Any]:
        request = check_responses(request)  # the API's 400s: required fields and types
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
            status=answer_status(answer),
            response_id=new_id("resp_"),
        )

    def stream_events(
        self, answer: dict[str, Any], request: dict[str, Any], call: CallContext
    ) -> Iterator[str]:
        output = output_items(answer, request)
        response_id = new_id("resp_")
        status = answer_status(answer)
        start = response_object(answer, request, [], status="in_progress", response_id=response_id)
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"response": start}),
            ("response.in_progress", {"response": start}),
        ]
        for index, item in enumerate(output):
            events.extend(item_events(index, item))
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


__all__ = ["APIError", "OpenAIResponses"]

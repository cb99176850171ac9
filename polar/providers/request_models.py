"""Each provider's request model: the fields its API requires, their JSON types and values.

One `check_*` per API, run first thing by its adapter's `to_chat`, so a request the real API
would refuse gets that API's own 400 (`request_schema.Dialect`) before anything is sampled.
The fields are those of the official SDKs' request types (`openai.types.chat.
completion_create_params`, `openai.types.responses.response_create_params`,
`anthropic.types.message_create_params`; Google's `GenerateContentRequest`), and
`tests/unit/polar/providers/test_request_models.py` fuzzes both against each other.
Deliberately more lenient than the real APIs, where a harness relies on it (docs/gateway.md):

* `model` is optional: the gateway serves the session's policy whatever the name;
* `null` stands for an absent optional field;
* unknown fields pass (vLLM's sampling extensions, training fields);
* Anthropic `role: "system"` messages are taken (as system text), and `max_tokens` is not
  required on `count_tokens`;
* Chat content parts vLLM serves (`audio_url`, `video_url`, `image_embeds`) are taken, and
  tool-call `arguments` may be an object (vLLM serialises it).
"""

from __future__ import annotations

from typing import Any

from polar.providers.base import CallContext
from polar.providers.request_schema import (
    AnthropicDialect,
    Dialect,
    Field,
    GoogleDialect,
    Model,
    Tagged,
    check,
    field,
    optional,
    snake_case,
)

OPENAI = Dialect()
ANTHROPIC = AnthropicDialect()
GOOGLE = GoogleDialect()

# --------------------------------------------------------------------------- OpenAI Chat

CHAT_ROLES = ("system", "assistant", "user", "function", "tool", "developer")
CHAT_REQUEST = Model(
    {
        "messages": field("array", required=True),
        "model": optional("string"),
        "stream": optional("boolean"),
        "stream_options": optional("object"),
        "n": optional("integer"),
        "max_tokens": optional("integer"),
        "max_completion_tokens": optional("integer"),
        "temperature": optional("number"),
        "top_p": optional("number"),
        "presence_penalty": optional("number"),
        "frequency_penalty": optional("number"),
        "seed": optional("integer"),
        "logprobs": optional("boolean"),
        "top_logprobs": optional("integer"),
        "stop": optional("string", "array", items="string"),
        "tools": optional("array", items="object"),
        "tool_choice": field("string", "object", "null", values=("none", "auto", "required")),
        "parallel_tool_calls": optional("boolean"),
        "response_format": optional("object"),
        "logit_bias": optional("object"),
        "metadata": optional("object"),
        "reasoning_effort": optional("string"),
        "user": optional("string"),
    }
)
CHAT_TOOL_CHOICE = Model(
    {"type": field("string", required=True, values=("function", "allowed_tools", "custom"))}
)
CONTENT = field("string", "array", required=True)
CHAT_MESSAGES = Tagged(
    "role",
    CHAT_ROLES,
    {
        # `tool_calls` is read on every message (below), so its type is checked on every role
        "system": {"content": CONTENT, "tool_calls": optional("array")},
        "developer": {"content": CONTENT, "tool_calls": optional("array")},
        "user": {"content": CONTENT, "tool_calls": optional("array")},
        "tool": {
            "content": CONTENT,
            "tool_call_id": field("string", required=True),
            "tool_calls": optional("array"),
        },
        "function": {
            "content": field("string", "null", required=True),
            "name": field("string"),
            "tool_calls": optional("array"),
        },
        "assistant": {"content": optional("string", "array"), "tool_calls": optional("array")},
    },
)
USER_PARTS = ("text", "image_url", "input_audio", "file", "audio_url", "video_url", "image_embeds")
PART_FIELDS: dict[str, dict[str, Field]] = {
    "text": {"text": field("string", required=True)},
    "image_url": {"image_url": field("object", required=True)},
    "refusal": {"refusal": field("string", required=True)},
}
CHAT_PARTS = {
    "user": Tagged("type", USER_PARTS, PART_FIELDS),
    "assistant": Tagged("type", ("text", "refusal"), PART_FIELDS),
}
TEXT_PARTS = Tagged("type", ("text",), PART_FIELDS)
CHAT_TOOL_CALL = Model({"id": field("string", required=True), "function": field("object")})
CHAT_FUNCTION = Model(
    {
        "name": field("string", required=True),
        "arguments": field("string", "object", required=True),
    }
)


def _chat_message(message: Any, path: tuple[str | int, ...]) -> None:
    CHAT_MESSAGES.check(message, OPENAI, path)
    content = message.get("content")
    if type(content) is list:
        parts = CHAT_PARTS.get(message["role"], TEXT_PARTS)
        for k, part in enumerate(content):
            parts.check(part, OPENAI, (*path, "content", k))
    for j, call in enumerate(message.get("tool_calls") or ()):
        check(call, CHAT_TOOL_CALL, OPENAI, (*path, "tool_calls", j))
        if "function" in call:
            check(call["function"], CHAT_FUNCTION, OPENAI, (*path, "tool_calls", j, "function"))


def check_chat(request: Any) -> dict[str, Any]:
    """A Chat Completions request as the API requires it (messages, roles, content, types)."""
    check(request, CHAT_REQUEST, OPENAI)
    if type(request.get("tool_choice")) is dict:
        check(request["tool_choice"], CHAT_TOOL_CHOICE, OPENAI, ("tool_choice",))
    for i, message in enumerate(request["messages"]):
        _chat_message(message, ("messages", i))
    return request


# --------------------------------------------------------------------------- OpenAI Responses

RESPONSES_REQUEST = Model(
    {
        "input": field("string", "array", required=True),
        "model": optional("string"),
        "instructions": optional("string"),
        "max_output_tokens": optional("integer"),
        "temperature": optional("number"),
        "top_p": optional("number"),
        "top_logprobs": optional("integer"),
        "tools": optional("array", items="object"),
        "tool_choice": optional("string", "object"),
        "parallel_tool_calls": optional("boolean"),
        "stream": optional("boolean"),
        "reasoning": optional("object"),
        "text": optional("object"),
        "store": optional("boolean"),
        "background": optional("boolean"),
        "include": optional("array", items="string"),
        "metadata": optional("object"),
        "previous_response_id": optional("string"),
        "prompt_cache_key": optional("string"),
        "truncation": optional("string"),
        "service_tier": optional("string"),
        "user": optional("string"),
    }
)
RESPONSES_ITEM = Model({"type": optional("string"), "role": optional("string")})
RESPONSES_MESSAGE = Model(
    {
        "role": field("string", required=True, values=("user", "assistant", "system", "developer")),
        "content": field("string", "array", required=True),
    }
)


def check_responses(request: Any) -> dict[str, Any]:
    """A Responses request as the API requires it (`input`, its messages' roles and content,
    field types); the other items' fields are checked where they are read
    (`openai_responses_input`)."""
    check(request, RESPONSES_REQUEST, OPENAI)
    if type(request["input"]) is list:
        for i, item in enumerate(request["input"]):
            check(item, RESPONSES_ITEM, OPENAI, ("input", i))
            if item.get("type", "message") == "message":
                check(item, RESPONSES_MESSAGE, OPENAI, ("input", i))
    return request


# --------------------------------------------------------------------------- Anthropic Messages

ANTHROPIC_REQUEST = Model(
    {
        "max_tokens": field("integer", required=True),
        "messages": field("array", required=True),
        "model": optional("string"),
        "system": optional("string", "array"),
        "temperature": optional("number"),
        "top_p": optional("number"),
        "top_k": optional("integer"),
        "stop_sequences": optional("array", items="string"),
        "stream": optional("boolean"),
        "tools": optional("array", items="object"),
        "tool_choice": optional("object"),
        "metadata": optional("object"),
        "thinking": optional("object"),
        "service_tier": optional("string"),
    }
)
ANTHROPIC_COUNT = ANTHROPIC_REQUEST.without("max_tokens")
ANTHROPIC_MESSAGE = Model(
    {
        "role": field("string", required=True, values=("user", "assistant", "system")),
        "content": field("string", "array", required=True),
    }
)
BLOCK_TYPES = (
    "text",
    "image",
    "document",
    "search_result",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "tool_result",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
    "container_upload",
)
ANTHROPIC_SYSTEM_BLOCK = Model(
    {
        "type": field("string", required=True, values=("text",)),
        "text": field("string", required=True),
    }
)
ANTHROPIC_BLOCKS = Tagged(
    "type",
    BLOCK_TYPES,
    {
        "text": {"text": field("string", required=True)},
        "image": {"source": field("object", required=True)},
        "thinking": {"thinking": field("string", required=True)},
        "tool_use": {
            "id": field("string", required=True),
            "name": field("string", required=True),
            "input": field("object", required=True),
        },
        "tool_result": {
            "tool_use_id": field("string", required=True),
            "content": optional("string", "array"),
        },
    },
)


def check_anthropic(request: Any, call: CallContext) -> dict[str, Any]:
    """A Messages request as the API requires it (`max_tokens`, roles, blocks, types);
    `count_tokens` takes no `max_tokens`."""
    counting = call.path.rstrip("/").endswith("/count_tokens")
    check(request, ANTHROPIC_COUNT if counting else ANTHROPIC_REQUEST, ANTHROPIC)
    if type(request.get("system")) is list:
        for j, block in enumerate(request["system"]):
            check(block, ANTHROPIC_SYSTEM_BLOCK, ANTHROPIC, ("system", j))
    for i, message in enumerate(request["messages"]):
        check(message, ANTHROPIC_MESSAGE, ANTHROPIC, ("messages", i))
        if type(message["content"]) is list:
            for j, block in enumerate(message["content"]):
                ANTHROPIC_BLOCKS.check(block, ANTHROPIC, ("messages", i, "content", j))
    return request


# --------------------------------------------------------------------------- Google generateContent


def _both_spellings(fields: dict[str, Field]) -> Model:
    """`fields` under their camelCase names and their snake_case ones (Google takes both)."""
    snake = {snake_case(k): v for k, v in fields.items()}
    return Model({**fields, **{k: v for k, v in snake.items() if k not in fields}})


GOOGLE_REQUEST = _both_spellings(
    {
        "contents": optional("array", "object"),
        "systemInstruction": optional("object", "string"),
        "generationConfig": optional("object"),
        "tools": optional("array"),
        "toolConfig": optional("object"),
        "safetySettings": optional("array"),
        "cachedContent": optional("string"),
    }
)
GOOGLE_CONFIG = _both_spellings(
    {
        "temperature": optional("number"),
        "topP": optional("number"),
        "topK": optional("number"),
        "maxOutputTokens": optional("integer"),
        "candidateCount": optional("integer"),
        "seed": optional("integer"),
        "presencePenalty": optional("number"),
        "frequencyPenalty": optional("number"),
        "stopSequences": optional("array", items="string"),
        "responseMimeType": optional("string"),
    }
)
GOOGLE_CONTENT = Model(
    {
        "role": field("string", values=("user", "model", "function", "")),
        "parts": field("array", required=True),
    }
)


def check_google(request: Any) -> dict[str, Any]:
    """A generateContent request as the API requires it (`contents`, roles, config types)."""
    check(request, GOOGLE_REQUEST, GOOGLE)
    if request.get("contents") is None:
        raise GOOGLE.missing(("contents",))
    contents = request["contents"]
    for i, content in enumerate(contents if type(contents) is list else [contents]):
        check(content, GOOGLE_CONTENT, GOOGLE, ("contents", i))
    config = request.get("generationConfig", request.get("generation_config"))
    if config is not None:
        check(config, GOOGLE_CONFIG, GOOGLE, ("generationConfig",))
    return request

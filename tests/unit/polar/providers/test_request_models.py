"""The providers' request models against the official SDKs' own request types (issue 37, item 5).

Each case is a valid request with one field replaced (a fuzzed JSON value), removed, or given
one of the values the APIs name. The gateway's verdict (its adapter's `to_chat` refuses with a
4xx, or not) must match the verdict of the SDK's request type (`anthropic.types.
message_create_params`, `openai.types.chat.completion_create_params`, `openai.types.responses.
response_create_params`, validated strictly with pydantic's TypeAdapter), except where the
gateway is deliberately more lenient (`polar.providers.request_models`, docs/gateway.md):
each such case is named by `lenient` below. Google's SDK (`google.genai.types`) models the
client's side, not the REST request: its `GenerationConfig` is the reference for the sampling
fields (typed the same on the wire); roles and `contents` follow the REST reference.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

import pytest
from anthropic.types import message_create_params
from google.genai import types as genai_types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params
from pydantic import TypeAdapter, ValidationError

from polar.providers import APIError, CallContext, get_provider

EXAMPLES = int(os.environ.get("POLAR_FUZZ_EXAMPLES", "50")) * 6
REMOVED = object()  # a mutation that deletes the field

CHAT_BODY: dict[str, Any] = {
    "model": "policy",
    "max_tokens": 16,
    "temperature": 0.5,
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "tool_choice": "auto",
    "stream": False,
}
RESPONSES_BODY: dict[str, Any] = {
    "model": "policy",
    "instructions": "be brief",
    "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
    "max_output_tokens": 16,
    "temperature": 0.5,
    "stream": False,
    "reasoning": {"effort": "low"},
}
ANTHROPIC_BODY: dict[str, Any] = {
    "model": "policy",
    "max_tokens": 16,
    "system": "be brief",
    "temperature": 0.5,
    "top_k": 5,
    "stop_sequences": ["X"],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "done"}],
        },
    ],
    "tools": [{"name": "f", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"},
    "stream": False,
}
PATHS: dict[str, list[tuple[Any, ...]]] = {
    "openai_chat": [
        ("model",),
        ("messages",),
        ("max_tokens",),
        ("n",),
        ("temperature",),
        ("top_p",),
        ("stop",),
        ("seed",),
        ("stream",),
        ("stream_options",),
        ("tool_choice",),
        ("parallel_tool_calls",),
        ("messages", 0),
        ("messages", 0, "role"),
        ("messages", 0, "content"),
        ("messages", 1, "content"),
        ("messages", 1, "content", 0, "type"),
        ("messages", 1, "content", 0, "text"),
        ("messages", 2, "role"),
        ("messages", 2, "content"),
        ("messages", 2, "tool_calls"),
        ("messages", 2, "tool_calls", 0, "id"),
        ("messages", 2, "tool_calls", 0, "function", "name"),
        ("messages", 3, "tool_call_id"),
        ("messages", 3, "content"),
    ],
    "openai_responses": [
        ("model",),
        ("input",),
        ("instructions",),
        ("max_output_tokens",),
        ("temperature",),
        ("top_p",),
        ("stream",),
        ("store",),
        ("parallel_tool_calls",),
        ("reasoning",),
        ("text",),
        ("input", 0),
        ("input", 0, "role"),
        ("input", 0, "content"),
        ("input", 0, "content", 0, "type"),
    ],
    "anthropic_messages": [
        ("model",),
        ("max_tokens",),
        ("messages",),
        ("system",),
        ("temperature",),
        ("top_p",),
        ("top_k",),
        ("stop_sequences",),
        ("stream",),
        ("metadata",),
        ("thinking",),
        ("tool_choice",),
        ("messages", 0),
        ("messages", 0, "role"),
        ("messages", 0, "content"),
        ("messages", 0, "content", 0, "type"),
        ("messages", 0, "content", 0, "text"),
        ("messages", 1, "role"),
        ("messages", 1, "content", 0, "id"),
        ("messages", 1, "content", 0, "name"),
        ("messages", 1, "content", 0, "input"),
        ("messages", 2, "content", 0, "tool_use_id"),
    ],
}
BODIES = {
    "openai_chat": CHAT_BODY,
    "openai_responses": RESPONSES_BODY,
    "anthropic_messages": ANTHROPIC_BODY,
}
REFERENCES = {
    "openai_chat": TypeAdapter(completion_create_params.CompletionCreateParams),
    "openai_responses": TypeAdapter(response_create_params.ResponseCreateParams),
    "anthropic_messages": TypeAdapter(message_create_params.MessageCreateParams),
}
BASE_TYPES: dict[str, Any] = {
    "openai_chat": completion_create_params.CompletionCreateParamsBase,
    "openai_responses": response_create_params.ResponseCreateParamsBase,
    "anthropic_messages": message_create_params.MessageCreateParamsBase,
}
DECLARED = {
    name: {"stream"} | kind.__required_keys__ | kind.__optional_keys__
    for name, kind in BASE_TYPES.items()
}
NAMED_VALUES = [
    "user",
    "assistant",
    "system",
    "developer",
    "tool",
    "wizard",
    "text",
    "image_url",
    "refusal",
    "bogus",
    "",
    "auto",
    "none",
    "required",
    0,
    1,
    -1,
    2.5,
    True,
    None,
    [],
    {},
    REMOVED,
]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(-2, 2, allow_nan=False)
    | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
)


def _materialised(value: Any) -> Any:
    """A validated TypedDict with its lazy `Iterable` fields consumed (which validates them)."""
    if isinstance(value, dict):
        return {k: _materialised(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_materialised(v) for v in value]
    if hasattr(value, "__next__"):
        return [_materialised(v) for v in value]
    return value


def sdk_accepts(provider: str, body: dict[str, Any]) -> bool:
    try:
        _materialised(REFERENCES[provider].validate_python(body, strict=True))
    except ValidationError:
        return False
    return True


def gateway_refusal(provider: str, body: dict[str, Any]) -> str | None:
    """The gateway's 4xx message for `body`, None if it takes it."""
    try:
        get_provider(provider).to_chat(copy.deepcopy(body), CallContext(path="/v1/x"))
    except APIError as exc:
        assert exc.status_code < 500, exc.message
        return exc.message
    return None


def mutated(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any] | None:
    """`body` with the field at `path` set to `value` (or removed); None if `path` is not there."""
    out = copy.deepcopy(body)
    node: Any = out
    for key in path[:-1]:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return None
    if value is REMOVED:
        if isinstance(node, list):
            del node[path[-1]]
        else:
            node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return out


# --------------------------------------------------------------------------- deliberate leniency

GATEWAY_LIMITS = ("not supported by this gateway", "must not be empty", "non-empty array")


def stricter(provider: str, path: tuple[Any, ...], value: Any, refusal: str) -> str | None:
    """Why the gateway refuses what the SDK's type takes; None: it must not."""
    wants_array = "array" in refusal or "list" in refusal
    if path[0] not in DECLARED[provider]:
        return "a field the SDK's type does not declare (it cannot judge it): the API's docs"
    if "boolean" in refusal and type(value) is int and value in (0, 1):
        return "pydantic's Literal[False] takes 0 (0 == False in Python); the wire wants a boolean"
    if wants_array and isinstance(value, str | dict):
        return "the SDK's Iterable[...] takes any iterable; the wire format takes an array"
    if provider == "openai_responses" and path == ("input",) and value is REMOVED:
        return "no server-side state (prompt templates, stored responses): input is required"
    return None


def lenient(provider: str, path: tuple[Any, ...], value: Any) -> str | None:
    """Why the gateway takes what the SDK's type refuses (docs/gateway.md); None: it must not."""
    if value is None and path[-1] != "messages" and path not in {("input",)}:
        return "null stands for an absent optional field"
    if path == ("model",):
        return "model is optional: the session's policy is served whatever the name"
    if provider == "anthropic_messages" and path[-1] == "role" and value == "system":
        return "Anthropic role system: taken as system text (some harnesses send it)"
    if provider == "openai_chat" and path[-1] == "role":
        return "a message's role changes which fields it needs; the gateway checks the new role"
    if provider == "openai_responses" and path[:1] == ("input",) and len(path) > 1:
        return "Responses items are read by type where they are used (openai_responses_input)"
    if provider == "openai_responses" and path in {("reasoning",), ("text",)}:
        return "Responses reasoning/text: only the fields the gateway reads are checked"
    if provider == "anthropic_messages" and path in {("thinking",), ("tool_choice",)}:
        return "Anthropic thinking/tool_choice objects: only what the gateway reads is checked"
    if provider == "openai_chat" and path == ("stream_options",):
        return "stream_options: only include_usage is read"
    return None


def _compare(provider: str, path: tuple[Any, ...], value: Any) -> None:
    body = mutated(BODIES[provider], path, value)
    if body is None:
        return
    sdk_ok = sdk_accepts(provider, body)
    refusal = gateway_refusal(provider, body)
    if sdk_ok and refusal is not None and not stricter(provider, path, value, refusal):
        assert any(limit in refusal for limit in GATEWAY_LIMITS), (
            f"{provider} {path}={value!r}: the SDK takes it, the gateway refuses: {refusal}"
        )
    if not sdk_ok and refusal is None:
        assert lenient(provider, path, value), (
            f"{provider} {path}={value!r}: the SDK's type refuses it, the gateway takes it"
        )


@pytest.mark.parametrize("provider", sorted(BODIES))
def test_valid_bodies_pass_both(provider: str) -> None:
    assert sdk_accepts(provider, BODIES[provider])
    assert gateway_refusal(provider, BODIES[provider]) is None


@pytest.mark.parametrize("provider", sorted(BODIES))
def test_named_values_agree_with_the_sdk(provider: str) -> None:
    """Every path given each value the APIs name (roles, part types, choices) or removed."""
    for path in PATHS[provider]:
        for value in NAMED_VALUES:
            _compare(provider, path, value)


@pytest.mark.parametrize("provider", sorted(BODIES))
def test_fuzzed_values_agree_with_the_sdk(provider: str) -> None:
    compare: Callable[[tuple[Any, ...], Any], None] = lambda p, v: _compare(provider, p, v)  # noqa: E731

    @given(path=st.sampled_from(PATHS[provider]), value=json_values)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def run(path: tuple[Any, ...], value: Any) -> None:
        compare(path, value)

    run()


GOOGLE_CONFIG_FIELDS = [
    "temperature",
    "topP",
    "topK",
    "maxOutputTokens",
    "candidateCount",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "stopSequences",
    "responseMimeType",
]


def _compare_google_config(name: str, value: Any) -> None:
    config = {} if value is REMOVED else {name: value}
    try:
        genai_types.GenerationConfig.model_validate(config, strict=True)
        sdk_ok = True
    except ValidationError:
        sdk_ok = False
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": config}
    refusal = gateway_refusal("google_generate", body)
    assert sdk_ok == (refusal is None), f"generationConfig.{name}={value!r}: {refusal}"


@pytest.mark.parametrize("name", GOOGLE_CONFIG_FIELDS)
def test_google_generation_config_agrees_with_the_sdk(name: str) -> None:
    for value in NAMED_VALUES:
        _compare_google_config(name, value)

    @given(value=json_values)
    @settings(
        max_examples=EXAMPLES // 10,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def run(value: Any) -> None:
        _compare_google_config(name, value)

    run()


def test_tool_calls_of_any_role_must_be_an_array() -> None:
    """The adapter reads `tool_calls` on every message: a non-array one on a user message is
    a 400 naming it, never a crash with a generic message (found by test_fuzz_gateway)."""
    from polar.providers.request_models import check_chat

    body = {"model": "policy", "messages": [{"role": "user", "content": "hi", "tool_calls": 7}]}
    with pytest.raises(Exception, match=r"messages\[0\]\.tool_calls"):
        check_chat(body)

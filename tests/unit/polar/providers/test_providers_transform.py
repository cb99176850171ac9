"""The provider transformers as pure functions: real harness captures, mapping rules, shapes.

The captures in `../shared/harnesses/captures/` are what Codex CLI, Claude
Code, Qwen Code and Pi really sent (first call, and the call after one tool
result). Their normalised requests must be append-only: the first call's
messages a prefix of the second's, whatever noise the harness added.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic.types
import openai.types.responses
import pytest
from google.genai import types as gtypes
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionChunk
from pydantic import TypeAdapter

from polar.providers import APIError, CallContext, detect, get_provider
from polar.providers.canonical import canonical_content, canonical_message
from polar.providers.google_generate import split_action
from polar.providers.google_request import json_schema
from polar.providers.openai_responses_input import input_messages
from tests.support.paths import TEST_DATA

CAPTURES = TEST_DATA / "harness_captures"  # from shared/harnesses
HARNESSES = {
    "codex": "openai_responses",
    "claude": "anthropic_messages",
    "qwen": "openai_chat",
    "pi": "openai_chat",
}


def capture(harness: str, n: int) -> dict[str, Any]:
    [path] = sorted((CAPTURES / harness).glob(f"{n:03d}-*.json"))
    return json.loads(path.read_text())


def normalise(harness: str, n: int) -> dict[str, Any]:
    raw = capture(harness, n)
    path = raw["path"].split("?")[0]
    provider = detect(path, raw["headers"])
    assert provider.name == HARNESSES[harness]
    return provider.to_chat(raw["body"], CallContext(path=path, headers=raw["headers"]))


def chat_answer(message: dict[str, Any], finish: str = "stop", **choice: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "policy",
        "choices": [
            {"index": 0, "message": {"role": "assistant"} | message, "finish_reason": finish}
            | choice
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    }


def call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --------------------------------------------------------------------------- captures


@pytest.mark.skipif(not CAPTURES.is_dir(), reason="harness captures not present")
@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_captured_conversations_normalise_append_only(harness: str) -> None:
    first, second = normalise(harness, 1), normalise(harness, 2)
    n = len(first["messages"])
    assert second["messages"][:n] == first["messages"]
    assert [m["role"] for m in second["messages"][n:]] == ["assistant", "tool"]
    assert first["tools"] == second["tools"] and first["tools"]
    text = json.dumps(second)
    assert "cache_control" not in text and "x-anthropic-billing-header" not in text
    assert "prompt_cache_key" not in second and "client_metadata" not in second
    [sent_call] = second["messages"][n]["tool_calls"]
    arguments = sent_call["function"]["arguments"]
    assert arguments == json.dumps(json.loads(arguments), ensure_ascii=False)  # canonical
    assert isinstance(second["messages"][n + 1]["content"], str)
    assert second["messages"][n]["content"] is None


@pytest.mark.skipif(not CAPTURES.is_dir(), reason="harness captures not present")
def test_captured_codex_tools_and_claude_noise() -> None:
    codex = normalise("codex", 1)
    names = [t["function"]["name"] for t in codex["tools"]]
    assert "multi_agent_v1__spawn_agent" in names and "exec_command" in names
    assert all(t["type"] == "function" for t in codex["tools"])  # web_search dropped
    assert [m["role"] for m in codex["messages"]] == ["system", "system", "user", "user"]
    claude = normalise("claude", 2)
    assert claude["messages"][0]["content"].startswith("You are a Claude agent")
    assert claude["messages"][2]["role"] == "system"  # kept where Claude Code put it
    raw = capture("claude", 1)["body"]["messages"][1]["content"]
    assert isinstance(raw, list)  # a list in the first call, a string in the second
    assert isinstance(capture("claude", 2)["body"]["messages"][1]["content"], str)


# --------------------------------------------------------------------------- canonical


def test_canonical_forms() -> None:
    parts = [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "b"},
    ]
    assert canonical_content(parts) == "a\nb"
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}
    assert canonical_content([parts[0], image]) == [{"type": "text", "text": "a"}, image]
    header = "x-anthropic-billing-header: cc_version=1; cch=9;"
    assert canonical_content(header, "system") == ""
    assert canonical_content(f"{header}\nrest", "system") == "rest"
    assert canonical_content(header, "user") == header  # only system text is touched
    compact = {"role": "assistant", "content": "", "tool_calls": [call("f", '{"a":1,"b":"é"}')]}
    assert canonical_message(compact) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [call("f", '{"a": 1, "b": "é"}')],
    }
    broken = {"role": "assistant", "tool_calls": [call("f", "{not json")]}
    assert canonical_message(broken)["tool_calls"][0]["function"]["arguments"] == "{not json"


# --------------------------------------------------------------------------- responses


def test_responses_items_join_into_turns() -> None:
    request = {
        "instructions": "sys",
        "input": [
            {"role": "user", "content": "hi"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "think"}],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Let me look."}],
            },
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": '{"p":"."}'},
            {
                "type": "function_call",
                "call_id": "c2",
                "name": "spawn_agent",
                "namespace": "multi_agent_v1",
                "arguments": "{}",
            },
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [
                    {"type": "input_text", "text": "a"},
                    {"type": "input_text", "text": "b"},
                ],
            },
            {"type": "function_call_output", "call_id": "c2", "output": "ok"},
            {
                "type": "custom_tool_call",
                "call_id": "c3",
                "name": "apply_patch",
                "input": "*** Begin",
            },
            {"type": "custom_tool_call_output", "call_id": "c3", "output": "done"},
        ],
    }
    messages = input_messages(request)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
    ]
    assert messages[2] == {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning_content": "think",
        "tool_calls": [
            call("ls", '{"p": "."}', "c1"),
            call("multi_agent_v1__spawn_agent", "{}", "c2"),
        ],
    }
    assert messages[3]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert messages[5]["tool_calls"] == [call("apply_patch", '{"input": "*** Begin"}', "c3")]


def test_responses_answer_shapes_validate_with_the_sdk() -> None:
    provider = get_provider("openai_responses")
    request = {
        "model": "codex",
        "input": "x",
        "tools": [
            {
                "type": "custom",
                "name": "apply_patch",
                "description": "Patch.",
                "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"},
            },
            {
                "type": "namespace",
                "name": "ns",
                "description": "d",
                "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            },
        ],
    }
    chat = provider.to_chat(request, CallContext())
    assert "Input grammar (lark):\nstart: x" in chat["tools"][0]["function"]["description"]
    answer = chat_answer(
        {
            "content": "ok",
            "reasoning": "hmm",
            "tool_calls": [
                call("apply_patch", '{"input": "*** Begin Patch"}', "c1"),
                call("ns__f", "{}", "c2"),
            ],
        },
        "tool_calls",
    )
    response = openai.types.responses.Response.model_validate(
        provider.from_chat(answer, request, CallContext())
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message", "custom_tool_call", "function_call"]
    patch, namespaced = response.output[2], response.output[3]
    assert patch.type == "custom_tool_call" and patch.input == "*** Begin Patch"
    assert namespaced.type == "function_call" and namespaced.namespace == "ns"
    assert response.usage is not None and response.usage.total_tokens == 16
    events = [e for e in provider.stream_events(answer, request, CallContext())]
    assert all(e.startswith("event: response.") for e in events)
    assert '"response.custom_tool_call_input.done"' in "".join(events)


# --------------------------------------------------------------------------- anthropic


def test_anthropic_mapping_rules() -> None:
    provider = get_provider("anthropic_messages")
    chat = provider.to_chat(
        {
            "model": "m",
            "max_tokens": 10,
            "top_k": 5,
            "stop_sequences": ["X"],
            "tools": [
                {"name": "t", "input_schema": {"type": "object"}},
                {"type": "bash_20250124", "name": "bash"},
            ],
            "tool_choice": {"type": "any"},
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA"},
                        },
                        {"type": "text", "text": "what is it?"},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "redacted_thinking", "data": "zz"},
                        {"type": "text", "text": "It is"},
                    ],
                },
            ],
        },
        CallContext(),
    )
    assert chat["messages"][0]["content"][0] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,AA"},
    }
    assert chat["messages"][1] == {
        "role": "assistant",
        "content": "It is",
        "reasoning_content": "hm",
    }
    assert chat["continue_final_message"] is True and chat["add_generation_prompt"] is False
    assert chat["tool_choice"] == "required" and len(chat["tools"]) == 1
    assert (chat["top_k"], chat["stop"], chat["max_tokens"]) == (5, ["X"], 10)
    with pytest.raises(APIError) as caught:
        provider.to_chat(
            {
                "max_tokens": 10,
                "messages": [
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "server_tool_use",
                                "id": "x",
                                "name": "web_search",
                                "input": {},
                            }
                        ],
                    }
                ],
            },
            CallContext(),
        )
    assert caught.value.status_code == 400 and "server_tool_use" in caught.value.message
    message = anthropic.types.Message.model_validate(
        provider.from_chat(
            chat_answer({"content": "", "tool_calls": [call("t", "not json")]}, "tool_calls"),
            {"model": "m"},
            CallContext(),
        )
    )
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "tool_use" and message.content[0].input == {
        "_raw": "not json"
    }
    cut = provider.from_chat(chat_answer({"content": "abc"}, "length"), {}, CallContext())
    assert cut["stop_reason"] == "max_tokens"


# --------------------------------------------------------------------------- google


def test_google_mapping_rules() -> None:
    provider = get_provider("google_generate")
    request = {
        "system_instruction": {"parts": [{"text": "sys"}]},  # snake_case is accepted too
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "plan", "thought": True},
                    {"functionCall": {"name": "ls", "args": {"p": "a"}}},
                    {"functionCall": {"name": "ls", "args": {"p": "b"}}, "thoughtSignature": "x"},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "ls", "response": {"out": "A"}}},
                    {"functionResponse": {"name": "ls", "response": {"out": "B"}}},
                ],
            },
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "ls",
                        "parameters": {
                            "type": "OBJECT",
                            "properties": {
                                "p": {"type": "STRING", "nullable": True},
                                "n": {"type": "ARRAY", "items": {"type": "INTEGER"}},
                            },
                        },
                    }
                ]
            },
            {"googleSearch": {}},
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["ls"]}},
        "generationConfig": {
            "maxOutputTokens": 9,
            "topK": 3,
            "seed": 7,
            "responseMimeType": "application/json",
        },
    }
    chat = provider.to_chat(request, CallContext(model="models/gem"))
    assert chat["model"] == "gem"
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool"]
    ids = [c["id"] for c in chat["messages"][2]["tool_calls"]]
    assert ids == ["call_1_1", "call_1_2"] and chat["messages"][2]["reasoning_content"] == "plan"
    assert [m["tool_call_id"] for m in chat["messages"][3:]] == ids  # matched in order
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "ls",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "p": {"type": ["string", "null"]},
                        "n": {"type": "array", "items": {"type": "integer"}},
                    },
                },
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "ls"}}
    assert (chat["max_tokens"], chat["top_k"], chat["seed"]) == (9, 3, 7)
    assert chat["response_format"] == {"type": "json_object"}
    assert json_schema({"anyOf": [{"type": "STRING"}]}) == {"anyOf": [{"type": "string"}]}
    several = {"contents": [{"parts": [{"text": "a"}]}], "generationConfig": {"candidateCount": 2}}
    assert provider.to_chat(several, CallContext())["n"] == 2  # each candidate recorded
    for bad in (
        {"contents": []},
        {"contents": [{"parts": [{"x": 1}]}]},
        {"contents": [{"parts": [{"text": "a"}]}], "cachedContent": "c/1"},
    ):
        with pytest.raises(APIError) as caught:
            provider.to_chat(bad, CallContext())
        assert caught.value.status_code == 400
    answer = chat_answer({"content": "x", "tool_calls": [call("ls", '{"p": "c"}')]}, "tool_calls")
    parsed = gtypes.GenerateContentResponse.model_validate(
        provider.from_chat(answer, {}, CallContext(model="gem"))
    )
    assert parsed.text == "x" and parsed.function_calls[0].args == {"p": "c"}  # type: ignore
    assert split_action("tunedModels/x:streamGenerateContent") == (
        "tunedModels/x",
        "streamGenerateContent",
    )
    assert split_action("gem") == ("gem", None)


# --------------------------------------------------------------------------- detection, errors


@pytest.mark.parametrize(
    ("path", "headers", "name"),
    [
        ("/v1/chat/completions", {}, "openai_chat"),
        ("/chat/completions", {"x-api-key": "k"}, "openai_chat"),
        ("/v1/responses", {}, "openai_responses"),
        ("/responses/input_tokens", {}, "openai_responses"),
        ("/v1/messages", {"anthropic-version": "2023-06-01"}, "anthropic_messages"),
        ("/v1/messages/count_tokens", {}, "anthropic_messages"),
        ("/v1/models", {"anthropic-version": "2023-06-01"}, "anthropic_messages"),
        ("/v1/models", {}, "openai_chat"),
        ("/v1/models/policy", {"x-goog-api-key": "k"}, "google_generate"),
        ("/v1beta/models", {}, "google_generate"),
        ("/v1beta/models/p:streamGenerateContent", {}, "google_generate"),
        ("/v1/models/p:generateContent", {}, "google_generate"),
        ("/v1/nope", {"anthropic-version": "2023-06-01"}, "anthropic_messages"),
    ],
)
def test_detection(path: str, headers: dict[str, str], name: str) -> None:
    assert detect(path, headers).name == name


def test_error_shapes() -> None:
    openai_status, openai_body = get_provider("openai_responses").error(
        401, "no", code="invalid_api_key"
    )
    assert (openai_status, openai_body) == (
        401,
        {
            "error": {
                "message": "no",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        },
    )
    assert get_provider("anthropic_messages").error(502, "down") == (
        502,
        {"type": "error", "error": {"type": "api_error", "message": "down"}},
    )
    assert get_provider("anthropic_messages").error(404, "?")[1]["error"]["type"] == (
        "not_found_error"
    )
    assert get_provider("google_generate").error(504, "slow") == (
        504,
        {"error": {"code": 504, "message": "slow", "status": "DEADLINE_EXCEEDED"}},
    )


def _sse_payloads(events: list[str]) -> list[dict[str, Any]]:
    out = []
    for event in events:
        [data] = [line[6:] for line in event.splitlines() if line.startswith("data: ")]
        out.append(json.loads(data))
    return out


def test_every_streamed_event_validates_strictly_with_the_sdks() -> None:
    answer = chat_answer(
        {
            "content": "Hello there, friend.",
            "reasoning_content": "Think.",
            "tool_calls": [call("ls", '{"p": "."}')],
        },
        "tool_calls",
    )
    responses = get_provider("openai_responses")
    adapter = TypeAdapter(openai.types.responses.ResponseStreamEvent)
    request = {"model": "m", "input": "x"}
    for payload in _sse_payloads(list(responses.stream_events(answer, request, CallContext()))):
        adapter.validate_python(payload)
    messages = get_provider("anthropic_messages")
    adapter = TypeAdapter(anthropic.types.RawMessageStreamEvent)
    payloads = _sse_payloads(list(messages.stream_events(answer, {"model": "m"}, CallContext())))
    assert payloads[1] == {"type": "ping"}
    for payload in payloads[:1] + payloads[2:]:
        adapter.validate_python(payload)
    google = get_provider("google_generate")
    sse = CallContext(model="m", action="streamGenerateContent", query={"alt": "sse"})
    for payload in _sse_payloads(list(google.stream_events(answer, {}, sse))):
        gtypes.GenerateContentResponse.model_validate(payload)
    chat = get_provider("openai_chat")
    events = list(
        chat.stream_events(answer, {"stream_options": {"include_usage": True}}, CallContext())
    )
    assert events[-1] == "data: [DONE]\n\n"
    for payload in _sse_payloads(events[:-1]):
        ChatCompletionChunk.model_validate(payload)


SEEDS: dict[str, dict[str, Any]] = {
    "openai_chat": {
        "model": "m",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "s"}]},
            {"role": "assistant", "content": None, "tool_calls": [call("f", '{"a": 1}')]},
            {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "r"}]},
        ],
    },
    "openai_responses": {
        "model": "m",
        "instructions": "i",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "d"}],
            },
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "s"}],
                "content": [{"type": "reasoning_text", "text": "r"}],
            },
            {
                "type": "function_call",
                "call_id": "c",
                "name": "f",
                "arguments": "{}",
                "namespace": "n",
            },
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": [{"type": "input_text", "text": "o"}],
            },
        ],
        "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {"type": "namespace", "name": "n", "tools": [{"type": "function", "name": "g"}]},
        ],
        "tool_choice": {"type": "function", "name": "f"},
        "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {}}},
        "max_output_tokens": 5,
    },
    "anthropic_messages": {
        "model": "m",
        "max_tokens": 5,
        "stop_sequences": ["x"],
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "t", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "t"},
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "u"},
                    {"type": "image", "source": {"type": "url", "url": "u"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t"},
                    {"type": "tool_use", "id": "i", "name": "t", "input": {"a": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "i",
                        "content": [{"type": "text", "text": "r"}],
                    }
                ],
            },
        ],
    },
    "google_generate": {
        "systemInstruction": {"parts": [{"text": "s"}]},
        "contents": [
            {
                "role": "user",
                "parts": [{"text": "u"}, {"inlineData": {"mimeType": "image/png", "data": "AA"}}],
            },
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "f",
                        "parameters": {"type": "OBJECT", "properties": {"a": {"type": "INTEGER"}}},
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
        "generationConfig": {
            "maxOutputTokens": 3,
            "stopSequences": ["x"],
            "responseMimeType": "application/json",
            "responseSchema": {"type": "OBJECT"},
        },
    },
}
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["type", "text", "role", "name", "parts", "content"]),
            children,
            max_size=3,
        )
    ),
    max_leaves=8,
)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for key, inner in value.items():
            out += _paths(inner, (*path, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            out += _paths(inner, (*path, i))
    return out


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    target = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return copy


@settings(max_examples=300, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(SEEDS)))
def test_malformed_requests_are_4xx_never_a_crash(data: st.DataObject, name: str) -> None:
    """Any one field of a valid request replaced by any JSON value: a checked 400 or a request."""
    seed = SEEDS[name]
    assert isinstance(get_provider(name).to_chat(seed, CallContext(model="m")), dict)
    path = data.draw(st.sampled_from(_paths(seed)))
    body = _replaced(seed, path, data.draw(JSON))
    try:
        chat = get_provider(name).to_chat(body, CallContext(model="m"))
    except APIError as exc:
        assert 400 <= exc.status_code < 500
        assert not exc.message.startswith("malformed request"), (path, body, exc.message)
        return
    assert isinstance(chat, dict) and isinstance(chat["messages"], list)

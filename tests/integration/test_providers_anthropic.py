"""Anthropic Messages through the gateway with the official `anthropic` SDK.

Against the scripted vLLM-shaped backend and the real SeaweedFS: Claude
Code's request shapes (system blocks with its billing header, cache markers,
a system message inside `messages`, tool results as text-part lists) are
normalised upstream and kept as sent in the record; answers come back as
messages, whole or streamed in the SDK's event order; errors as the SDK's
typed exceptions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from polar.providers import CallContext, get_provider
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from polar.tokenization import load_tokenizer, render_prompt_ids
from proxy.app import create_app
from tests.integration.test_gateway import assert_recorded_exactly, stack
from tests.support import ScriptedReply, error, serve_app, text, tool_call

TOOLS: list[dict[str, Any]] = [
    {
        "name": "Bash",
        "description": "Run a bash command.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
]
SYSTEM: list[dict[str, Any]] = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.307; cch=ab12;"},
    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
]
USER: dict[str, Any] = {
    "role": "user",
    "content": [
        {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
        {"type": "text", "text": "List the files.", "cache_control": {"type": "ephemeral"}},
    ],
}


def client_for(url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=30)


def test_message_text_and_normalised_noise(base_settings: Settings, storage: Storage) -> None:
    with stack(base_settings, [text("Hello.")]) as (backend, gateway):
        identity, key = gateway.session()
        message = client_for(gateway.url, key).messages.create(
            model="claude-sonnet",
            max_tokens=128,
            system=SYSTEM,  # type: ignore[arg-type]
            messages=[USER],
            metadata={"user_id": "u1"},
            extra_body={"temperature": 0.2, "top_p": 0.9},  # this SDK has no such arguments
        )
        records = storage.list_completions(identity.session_id)

    assert message.content[0].type == "text" and message.content[0].text == "Hello."
    assert message.stop_reason == "end_turn" and message.model == "claude-sonnet"
    assert message.usage.output_tokens == len(backend.responses[0]["choices"][0]["token_ids"])
    sent = backend.requests[0]
    assert sent["messages"] == [
        {"role": "system", "content": "You are Claude Code."},
        {"role": "user", "content": "<system-reminder>ctx</system-reminder>\nList the files."},
    ]
    assert sent["max_tokens"] == 128 and sent["temperature"] == 0.2 and sent["top_p"] == 0.9
    assert "metadata" not in sent and "system" not in sent
    [record] = records
    assert record.provider == "anthropic_messages"
    assert record.request["system"] == SYSTEM  # the original, billing header and all
    assert record.normalized_request == sent
    assert_recorded_exactly(record, backend.responses[0])


def test_stream_tool_use_then_tool_result(base_settings: Settings, storage: Storage) -> None:
    replies = [
        tool_call("Bash", {"command": "ls -a"}, reasoning="I will list them."),
        text("Two files: README.md and main.py."),
    ]
    with stack(base_settings, replies) as (backend, gateway):
        identity, key = gateway.session()
        client = client_for(gateway.url, key)
        with client.messages.stream(
            model="policy",
            max_tokens=256,
            system=SYSTEM,
            messages=[USER],  # type: ignore[arg-type]
            tools=TOOLS,
            tool_choice={"type": "auto"},  # type: ignore[arg-type]
        ) as stream:
            events = list(stream)
            first = stream.get_final_message()
        thinking, use = first.content
        assert thinking.type == "thinking" and use.type == "tool_use"
        followup = [
            USER,
            {"role": "system", "content": "# Environment\ncwd: /workspace"},
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in first.content],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "is_error": False,
                        "content": [
                            {"type": "text", "text": "README.md"},
                            {"type": "text", "text": "main.py"},
                        ],
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ]
        with client.messages.stream(
            model="policy",
            max_tokens=256,
            system=SYSTEM,
            messages=followup,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
        ) as stream:
            second = stream.get_final_message()
        records = storage.list_completions(identity.session_id)

    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "thinking" in kinds and "input_json" in kinds and "message_delta" in kinds
    assert thinking.thinking == "I will list them." and thinking.signature
    expected_id = backend.responses[0]["choices"][0]["message"]["tool_calls"][0]["id"]
    assert use.id == expected_id and use.name == "Bash" and use.input == {"command": "ls -a"}
    assert first.stop_reason == "tool_use"
    assert second.content[0].text == "Two files: README.md and main.py."  # type: ignore[union-attr]
    assert second.stop_reason == "end_turn"

    sent = backend.requests[1]
    assert [t["function"]["name"] for t in sent["tools"]] == ["Bash"]  # server tool dropped
    assert backend.requests[0]["tool_choice"] == "auto"
    assert [m["role"] for m in sent["messages"]] == [
        "system",
        "user",
        "system",
        "assistant",
        "tool",
    ]
    assert sent["messages"][3] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "I will list them.",
        "tool_calls": [
            {
                "id": use.id,
                "type": "function",
                "function": {"name": "Bash", "arguments": '{"command": "ls -a"}'},
            }
        ],
    }
    assert sent["messages"][4] == {
        "role": "tool",
        "tool_call_id": use.id,
        "content": "README.md\nmain.py",
    }
    assert backend.requests[0]["messages"] == sent["messages"][:2]
    assert [r.provider for r in records] == ["anthropic_messages"] * 2
    for record, answer in zip(records, backend.responses, strict=True):
        assert_recorded_exactly(record, answer)


def test_stop_sequence_tool_choice_and_models(base_settings: Settings, storage: Storage) -> None:
    replies = [ScriptedReply(text="a, b", stop_reason="\n\n"), tool_call("Bash", {"command": "x"})]
    # a forced tool is vLLM's guided decoding: answered here, recorded untrainable (issue 21)
    untrainable = {"off_policy": "record_untrainable"}
    with stack(base_settings, replies, **untrainable) as (backend, gateway):
        identity, key = gateway.session()
        client = client_for(gateway.url, key)
        stopped = client.messages.create(
            model="p",
            max_tokens=16,
            messages=[{"role": "user", "content": "list"}],
            stop_sequences=["\n\n"],
        )
        forced = client.messages.create(
            model="p",
            max_tokens=16,
            messages=[{"role": "user", "content": "run"}],
            tools=TOOLS,
            tool_choice={
                "type": "tool",
                "name": "Bash",  # type: ignore[arg-type]
                "disable_parallel_tool_use": True,
            },
        )
        models = client.models.list()
        probes = [httpx.head(f"{gateway.url}{p}") for p in ("/", "/v1")]
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "\n\n"
    assert backend.requests[0]["stop"] == ["\n\n"]
    assert backend.requests[1]["tool_choice"] == {"type": "function", "function": {"name": "Bash"}}
    assert backend.requests[1]["parallel_tool_calls"] is False
    assert forced.stop_reason == "tool_use"
    records = storage.list_completions(identity.session_id)
    assert [r.untrainable for r in records] == [None, "off-policy sampling controls: tool_choice"]
    assert [m.id for m in models.data] == ["policy"]
    assert all(p.status_code == 200 for p in probes)


def test_count_tokens_approximate_and_with_a_tokenizer(
    base_settings: Settings, storage: Storage
) -> None:
    seen: list[dict[str, Any]] = []

    def counter(chat: dict[str, Any]) -> int:
        seen.append(chat)
        return 42

    messages: list[Any] = [USER]
    with stack(base_settings, []) as (_, gateway):
        _, key = gateway.session()
        approx = client_for(gateway.url, key).messages.count_tokens(
            model="p",
            system=SYSTEM,
            messages=messages,
            tools=TOOLS,  # type: ignore[arg-type]
        )
    settings = base_settings.model_copy(update={"upstream_urls": "http://127.0.0.1:9/v1"})
    with serve_app(create_app(settings, storage, token_counter=counter)) as url:
        key = mint_session_key(SessionIdentity("s-count", "t"), settings.session_secret)
        exact = client_for(url, key).messages.count_tokens(
            model="p",
            system=SYSTEM,
            messages=messages,
            tools=TOOLS,  # type: ignore[arg-type]
        )
    assert approx.input_tokens > 10 and (approx.model_extra or {}).get("approximate") is True
    assert exact.input_tokens == 42 and "approximate" not in (exact.model_extra or {})
    assert seen[0]["messages"][0] == {"role": "system", "content": "You are Claude Code."}
    assert [t["function"]["name"] for t in seen[0]["tools"]] == ["Bash"]
    assert storage.count_completions("s-count") == 0  # counting is no model call


def test_errors_are_typed_and_anthropic_shaped(base_settings: Settings, storage: Storage) -> None:
    replies = [error(500, "backend exploded"), error(400, "prompt too long")]
    with stack(base_settings, replies) as (_, gateway):
        identity, key = gateway.session()
        client = client_for(gateway.url, key)
        simple: list[Any] = [{"role": "user", "content": "hi"}]
        with pytest.raises(anthropic.AuthenticationError) as auth:
            client_for(gateway.url, "sk-ant-nope").messages.create(
                model="p", max_tokens=8, messages=simple
            )
        with pytest.raises(anthropic.InternalServerError) as down:
            client.messages.create(model="p", max_tokens=8, messages=simple, stream=True)
        with pytest.raises(anthropic.BadRequestError) as too_long:
            client.messages.create(model="p", max_tokens=8, messages=simple)
        with pytest.raises(anthropic.BadRequestError) as empty:
            client.messages.create(model="p", max_tokens=8, messages=[])
        bearer = httpx.post(
            f"{gateway.url}/v1/messages?beta=true",
            json={"model": "p", "max_tokens": 8, "messages": simple},
            headers={"Authorization": f"Bearer {key}", "anthropic-version": "2023-06-01"},
        )
        records = storage.list_completions(identity.session_id)
    for caught, kind in (
        (auth, "authentication_error"),
        (down, "api_error"),
        (too_long, "invalid_request_error"),
        (empty, "invalid_request_error"),
    ):
        body = caught.value.response.json()
        assert set(body) == {"type", "error"} and body["type"] == "error", body
        assert body["error"]["type"] == kind and body["error"]["message"], body
    assert down.value.status_code == 502 and "backend exploded" in str(down.value.body)
    assert too_long.value.body["error"]["message"] == "prompt too long"  # type: ignore[index]
    assert bearer.status_code == 502  # scripted backend has no reply left: its 500 -> 502
    assert [r.status_code for r in records] == [502, 400, 502]
    assert all(r.provider == "anthropic_messages" for r in records)
    assert records[0].request["stream"] is True and "stream" not in records[0].normalized_request


def test_count_tokens_with_the_model_tokenizer(
    base_settings: Settings, storage: Storage, model_dir: Path
) -> None:
    """With `model_dir` set, counts are the chat template's exact prompt length."""
    settings = base_settings.model_copy(
        update={"upstream_urls": "http://127.0.0.1:9/v1", "model_dir": model_dir}
    )
    request: dict[str, Any] = {"model": "p", "system": SYSTEM, "messages": [USER], "tools": TOOLS}
    chat = get_provider("anthropic_messages").to_chat(
        request, CallContext(path="/v1/messages/count_tokens")
    )
    expected = len(render_prompt_ids(load_tokenizer(str(model_dir)), chat))
    with serve_app(create_app(settings, storage)) as url:
        key = mint_session_key(SessionIdentity("s-count", "t"), settings.session_secret)
        counted = client_for(url, key).messages.count_tokens(**request)
    assert counted.input_tokens == expected
    assert "approximate" not in (counted.model_extra or {})

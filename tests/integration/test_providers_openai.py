"""OpenAI Responses through the gateway with the official `openai` SDK (Chat: test_gateway.py).

Against the scripted vLLM-shaped backend and the real SeaweedFS: answers come
back in the Responses shape, whole or streamed in the SDK's event order, and
every call is recorded with its provider, the original request, the
normalised Chat request and the backend's token ids.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from polar.settings import Settings
from polar.storage import Storage
from tests.integration.test_gateway import assert_openai_error, assert_recorded_exactly, stack
from tests.support import ScriptedReply, error, text, tool_call

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a shell command.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}},
            "required": ["cmd"],
        },
    },
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Sub-agents.",
        "tools": [
            {
                "type": "function",
                "name": "spawn_agent",
                "description": "Start a sub-agent.",
                "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
            }
        ],
    },
    {"type": "web_search", "external_web_access": True},
]
DEVELOPER = {
    "type": "message",
    "role": "developer",
    "content": [{"type": "input_text", "text": "You are a coding agent."}],
}
USER = {
    "type": "message",
    "role": "user",
    "content": [{"type": "input_text", "text": "List the files."}],
}


def test_responses_text(base_settings: Settings, storage: Storage) -> None:
    with stack(base_settings, [text("Two files.")]) as (backend, gateway):
        identity, key = gateway.session()
        response = gateway.client(key).responses.create(
            model="gpt-codex",
            instructions="Be brief.",
            input="What is here?",
            max_output_tokens=64,
            temperature=0.5,
            store=False,
            include=["reasoning.encrypted_content"],
        )
        records = storage.list_completions(identity.session_id)

    assert response.output_text == "Two files."
    assert response.status == "completed" and response.model == "gpt-codex"
    assert response.usage is not None
    assert response.usage.output_tokens == len(backend.responses[0]["choices"][0]["token_ids"])
    sent = backend.requests[0]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is here?"},
    ]
    assert sent["max_tokens"] == 64 and sent["temperature"] == 0.5
    assert "store" not in sent and "include" not in sent and "input" not in sent
    [record] = records
    assert record.provider == "openai_responses"
    assert record.request["input"] == "What is here?" and record.request["store"] is False
    assert record.normalized_request == sent
    assert_recorded_exactly(record, backend.responses[0])


def test_responses_stream_tool_call_round_trip(base_settings: Settings, storage: Storage) -> None:
    replies = [
        tool_call("exec_command", {"cmd": "ls"}, reasoning="Look first."),
        text("README.md and main.py.", reasoning="The listing answers it."),
    ]
    with stack(base_settings, replies) as (backend, gateway):
        identity, key = gateway.session()
        client = gateway.client(key)
        first_input: list[Any] = [DEVELOPER, USER]
        with client.responses.stream(
            model="policy",
            input=first_input,
            tools=TOOLS,
            store=False,  # type: ignore[arg-type]
            include=["reasoning.encrypted_content"],
            prompt_cache_key="abc",
        ) as stream:
            events = list(stream)
            first = stream.get_final_response()
        reasoning, call = first.output
        assert reasoning.type == "reasoning" and call.type == "function_call"
        # the harness echoes the output items and adds the tool's output
        second_input = [
            *first_input,
            *[item.model_dump(exclude_none=True) for item in first.output],
            {
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": "README.md\nmain.py\n",
            },
        ]
        with client.responses.stream(
            model="policy",
            input=second_input,
            tools=TOOLS,
            store=False,  # type: ignore[arg-type]
        ) as stream:
            second = stream.get_final_response()
        records = storage.list_completions(identity.session_id)

    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "response.reasoning_text.delta" in kinds
    assert "response.function_call_arguments.delta" in kinds
    assert kinds.index("response.function_call_arguments.done") < kinds.index("response.completed")

    expected = backend.responses[0]["choices"][0]["message"]
    assert call.name == "exec_command" and json.loads(call.arguments) == {"cmd": "ls"}
    assert call.call_id == expected["tool_calls"][0]["id"]
    assert reasoning.content and reasoning.content[0].text == "Look first."
    assert second.output_text == "README.md and main.py."
    assert [i.type for i in second.output] == ["reasoning", "message"]

    # upstream: hosted tool dropped, namespace flattened, one assistant turn rebuilt
    sent = backend.requests[1]
    names = [t["function"]["name"] for t in sent["tools"]]
    assert names == ["exec_command", "multi_agent_v1__spawn_agent"]
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent["messages"][2] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Look first.",
        "tool_calls": [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": "exec_command", "arguments": '{"cmd": "ls"}'},
            }
        ],
    }
    assert sent["messages"][3] == {
        "role": "tool",
        "tool_call_id": call.call_id,
        "content": "README.md\nmain.py\n",
    }
    assert backend.requests[0]["messages"] == sent["messages"][:2]
    assert [r.provider for r in records] == ["openai_responses"] * 2
    assert records[1].request["input"] == json.loads(json.dumps(second_input))
    for record, answer in zip(records, backend.responses, strict=True):
        assert_recorded_exactly(record, answer)
        assert "stream" not in record.normalized_request


def test_responses_namespace_call_and_length_cut(base_settings: Settings, storage: Storage) -> None:
    replies = [
        tool_call("multi_agent_v1__spawn_agent", {"task": "tests"}),
        ScriptedReply(text="It was cut", finish_reason="length"),
    ]
    with stack(base_settings, replies) as (_, gateway):
        _, key = gateway.session()
        client = gateway.client(key)
        called = client.responses.create(model="p", input=[USER], tools=TOOLS)  # type: ignore[arg-type]
        cut = list(client.responses.create(model="p", input="go on", stream=True))
    [call] = called.output
    assert call.type == "function_call" and call.name == "spawn_agent"
    assert call.namespace == "multi_agent_v1"
    assert cut[-1].type == "response.incomplete"
    final = cut[-1].response  # type: ignore[union-attr]
    assert final.status == "incomplete" and final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.output_text == "It was cut"


def test_responses_errors_are_typed(base_settings: Settings, storage: Storage) -> None:
    with stack(base_settings, [error(500, "kaput")]) as (backend, gateway):
        _, key = gateway.session()
        client = gateway.client(key)
        with pytest.raises(openai.BadRequestError) as stateful:
            client.responses.create(model="p", input="hi", previous_response_id="resp_1")
        with pytest.raises(openai.BadRequestError) as hosted:
            client.responses.create(
                model="p",
                input="hi",
                tools=TOOLS,  # type: ignore[arg-type]
                tool_choice={"type": "web_search"},
            )  # type: ignore[typeddict-item]
        with pytest.raises(openai.BadRequestError) as unknown_item:
            client.responses.create(model="p", input=[{"type": "mystery_item"}])  # type: ignore[list-item]
        with pytest.raises(openai.AuthenticationError):
            gateway.client("sk-nope").responses.create(model="p", input="hi")
        with pytest.raises(openai.InternalServerError) as down:
            client.responses.create(model="p", input="hi")
        counted = httpx.post(
            f"{gateway.url}/v1/responses/input_tokens",
            json={"model": "p", "input": "hello there"},
            headers={"Authorization": f"Bearer {key}"},
        )
    assert_openai_error(stateful.value.response.json(), "unsupported_parameter")
    assert assert_openai_error(hosted.value.response.json())["param"] == "tool_choice"
    assert "mystery_item" in assert_openai_error(unknown_item.value.response.json())["message"]
    assert down.value.status_code == 502
    assert "kaput" in assert_openai_error(down.value.response.json(), "upstream_error")["message"]
    assert len(backend.requests) == 1  # only the last call went upstream
    assert counted.status_code == 200
    assert counted.json()["input_tokens"] > 0 and counted.json()["approximate"] is True

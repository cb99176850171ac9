"""Google generateContent through the gateway with the official `google-genai` SDK.

Against the scripted vLLM-shaped backend and the real SeaweedFS: function
declarations, a function call and its response, streaming (`?alt=sse`),
token counting, the `?key=` carrier, and errors as the SDK's typed
exceptions in Google's error shape.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from polar.settings import Settings
from polar.storage import Storage
from tests.integration.test_gateway import assert_recorded_exactly, stack
from tests.support import error, text, tool_call

SHELL = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="run_shell",
            description="Run a shell command.",
            parameters=types.Schema(
                type=types.Type.OBJECT,
                properties={"command": types.Schema(type=types.Type.STRING)},
                required=["command"],
            ),
        )
    ]
)


def client_for(url: str, key: str, api_version: str | None = None) -> genai.Client:
    """The SDK pointed at the gateway (it calls `/v1/models/...` unless told `v1beta`)."""
    options = types.HttpOptions(
        base_url=url,
        timeout=30_000,
        api_version=api_version,
        retry_options=types.HttpRetryOptions(attempts=1),
    )
    return genai.Client(api_key=key, http_options=options)


def config(**extra: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        system_instruction="You are a coding agent.",
        tools=[SHELL],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        **extra,
    )


def test_generate_function_call_round_trip(base_settings: Settings, storage: Storage) -> None:
    replies = [tool_call("run_shell", {"command": "ls"}), text("Two files.")]
    with stack(base_settings, replies) as (backend, gateway):
        identity, key = gateway.session()
        client = client_for(gateway.url, key)
        question = types.Content(role="user", parts=[types.Part.from_text(text="List files.")])
        first = client.models.generate_content(
            model="gemini-policy",
            contents=[question],
            config=config(max_output_tokens=64, temperature=0.3, top_p=0.8, stop_sequences=["END"]),
        )
        [call] = first.function_calls or []
        answer = types.Part.from_function_response(
            name="run_shell", response={"output": "a.py\nb.py"}
        )
        second = client.models.generate_content(
            model="gemini-policy",
            contents=[
                question,
                first.candidates[0].content,  # type: ignore[index,list-item]
                types.Content(role="user", parts=[answer]),
            ],
            config=config(),
        )
        records = storage.list_completions(identity.session_id)

    assert call.name == "run_shell" and call.args == {"command": "ls"}
    assert first.candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    assert second.text == "Two files."
    assert second.usage_metadata is not None
    assert second.usage_metadata.candidates_token_count == len(
        backend.responses[1]["choices"][0]["token_ids"]
    )

    sent = backend.requests[0]
    assert sent["messages"] == [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "List files."},
    ]
    assert sent["tools"][0]["function"]["parameters"] == {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    }
    assert (sent["max_tokens"], sent["temperature"], sent["top_p"], sent["stop"]) == (
        64,
        0.3,
        0.8,
        ["END"],
    )
    followup = backend.requests[1]["messages"]
    assert [m["role"] for m in followup] == ["system", "user", "assistant", "tool"]
    call_id = followup[2]["tool_calls"][0]["id"]
    assert followup[2]["tool_calls"][0]["function"] == {
        "name": "run_shell",
        "arguments": '{"command": "ls"}',
    }
    assert followup[3] == {
        "role": "tool",
        "tool_call_id": call_id,
        "content": '{"output": "a.py\\nb.py"}',
    }
    assert [r.provider for r in records] == ["google_generate"] * 2
    assert records[0].request["contents"][0]["parts"] == [{"text": "List files."}]
    for record, reply in zip(records, backend.responses, strict=True):
        assert_recorded_exactly(record, reply)
        assert record.normalized_request["model"] == "policy"  # pinned upstream


def test_stream_generate_with_a_function_call(base_settings: Settings, storage: Storage) -> None:
    replies = [
        tool_call("run_shell", {"command": "cat README.md"}, reasoning="Read it first."),
        text("The README says hello, world."),
    ]
    with stack(base_settings, replies) as (backend, gateway):
        identity, key = gateway.session()
        client = client_for(gateway.url, key, api_version="v1beta")
        called = list(
            client.models.generate_content_stream(
                model="policy", contents="What does the README say?", config=config()
            )
        )
        said = list(
            client.models.generate_content_stream(
                model="policy", contents="Say it.", config=config()
            )
        )
        plain = httpx.post(
            f"{gateway.url}/v1beta/models/policy:streamGenerateContent",
            params={"key": key},
            json={"contents": [{"parts": [{"text": "x"}]}]},
        )
        records = storage.list_completions(identity.session_id)

    calls = [c for chunk in called for c in chunk.function_calls or []]
    assert [(c.name, c.args) for c in calls] == [("run_shell", {"command": "cat README.md"})]
    thoughts = [
        p.text
        for chunk in called
        for p in chunk.candidates[0].content.parts  # type: ignore
        if p.thought
    ]
    assert "".join(thoughts) == "Read it first."  # type: ignore[arg-type]
    assert len(said) > 1 and "".join(c.text or "" for c in said) == "The README says hello, world."
    assert said[-1].candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    assert all(c.usage_metadata is None for c in said[:-1]) and said[-1].usage_metadata
    # the key came as ?key=; the scripted backend had no third reply: its 500 is a 502
    assert plain.status_code == 502
    assert plain.json()["error"]["status"] == "UNAVAILABLE"
    assert [r.provider for r in records] == ["google_generate"] * 3
    assert "stream" not in backend.requests[0]
    assert_recorded_exactly(records[0], backend.responses[0])


def test_json_array_stream_count_tokens_and_models(
    base_settings: Settings, storage: Storage
) -> None:
    with stack(base_settings, [text("hi there")]) as (_, gateway):
        _, key = gateway.session()
        client = client_for(gateway.url, key)
        array = httpx.post(
            f"{gateway.url}/v1beta/models/policy:streamGenerateContent",
            params={"key": key},
            json={"contents": [{"parts": [{"text": "x"}]}]},
        )
        counted = client.models.count_tokens(model="policy", contents="How many tokens?")
        listed = list(client.models.list())
        got = client.models.get(model="policy")
    assert array.status_code == 200 and array.headers["content-type"].startswith("application/json")
    chunks = array.json()
    assert (
        isinstance(chunks, list)
        and "".join(p["text"] for c in chunks for p in c["candidates"][0]["content"]["parts"])
        == "hi there"
    )
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert counted.total_tokens is not None and counted.total_tokens > 0
    assert [m.name for m in listed] == ["models/policy"]
    assert got.name == "models/policy"


def test_errors_are_typed_and_google_shaped(base_settings: Settings, storage: Storage) -> None:
    with stack(base_settings, [error(500, "backend down"), error(400, "too long")]) as (_, gateway):
        identity, key = gateway.session()
        client = client_for(gateway.url, key)
        stranger = client_for(gateway.url, "AIza-not-a-session")
        with pytest.raises(errors.ClientError) as auth:
            stranger.models.generate_content(model="policy", contents="hi")
        with pytest.raises(errors.ServerError) as down:
            client.models.generate_content(model="policy", contents="hi")
        with pytest.raises(errors.ClientError) as too_long:
            client.models.generate_content(model="policy", contents="hi")
        unknown = httpx.post(
            f"{gateway.url}/v1beta/models/policy:embedContent",
            headers={"x-goog-api-key": key},
            json={},
        )
        no_contents = httpx.post(
            f"{gateway.url}/v1beta/models/policy:generateContent",
            headers={"x-goog-api-key": key},
            json={"contents": []},
        )
        records = storage.list_completions(identity.session_id)
    assert (auth.value.code, auth.value.status) == (401, "UNAUTHENTICATED")
    assert (down.value.code, down.value.status) == (502, "UNAVAILABLE")
    assert "backend down" in (down.value.message or "")
    assert (too_long.value.code, too_long.value.message) == (400, "too long")
    for answer, code in ((unknown, 404), (no_contents, 400)):
        assert answer.status_code == code
        body = answer.json()
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "status"}
        assert body["error"]["code"] == code
    assert [r.status_code for r in records] == [502, 400]
    assert json.dumps(records[0].request)  # the original request is kept


# ------------------------------------------------------------------ Google schemas as JSON Schema

GEMINI_SCHEMA: dict[str, Any] = {
    "type": "OBJECT",
    "description": "A plan.",
    "propertyOrdering": ["steps", "mode", "limit"],
    "properties": {
        "steps": {
            "type": "ARRAY",
            "minItems": "1",
            "items": {
                "type": "OBJECT",
                "properties": {
                    "cmd": {"type": "STRING", "format": "enum", "enum": ["ls", "cat"]},
                    "at": {"type": "STRING", "format": "date-time", "nullable": True},
                    "ratio": {"type": "NUMBER", "format": "double"},
                },
                "required": ["cmd"],
            },
        },
        "mode": {"type": "STRING", "enum": ["fast", "slow"], "nullable": True},
        "limit": {"anyOf": [{"type": "INTEGER"}, {"type": "BOOLEAN"}], "nullable": True},
        "nullable": {"type": "TYPE_UNSPECIFIED", "example": 3},
    },
    "required": ["steps"],
}

JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A plan.",
    "properties": {
        "steps": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "cmd": {"type": "string", "enum": ["ls", "cat"]},
                    "at": {"type": ["string", "null"], "format": "date-time"},
                    "ratio": {"type": "number", "format": "double"},
                },
                "required": ["cmd"],
            },
        },
        "mode": {"type": ["string", "null"], "enum": ["fast", "slow", None]},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "boolean"}, {"type": "null"}]},
        "nullable": {},
    },
    "required": ["steps"],
}


def test_json_schema_normalises_gemini_schemas() -> None:
    from polar.providers.google_request import json_schema

    assert json_schema(GEMINI_SCHEMA) == JSON_SCHEMA
    assert json_schema(JSON_SCHEMA) == JSON_SCHEMA  # plain JSON Schema is a fixed point
    snake = {"type": "ARRAY", "min_items": "2", "any_of": [{"type": "STRING"}]}
    assert json_schema(snake) == {"type": "array", "minItems": 2, "anyOf": [{"type": "string"}]}
    assert json_schema({"type": ["STRING", "NULL"]}) == {"type": ["string", "null"]}
    assert json_schema({"type": "NULL", "nullable": True}) == {"type": "null"}


def test_every_google_schema_field_is_normalised() -> None:
    from polar.providers import CallContext, get_provider

    google = get_provider("google_generate")
    declarations = [
        {"name": "a", "parameters": GEMINI_SCHEMA},
        {"name": "b", "parametersJsonSchema": GEMINI_SCHEMA},
    ]
    for field in ("responseSchema", "responseJsonSchema"):
        chat = google.to_chat(
            {
                "contents": [{"role": "user", "parts": [{"text": "plan"}]}],
                "tools": [{"functionDeclarations": declarations}],
                "generationConfig": {"responseMimeType": "application/json", field: GEMINI_SCHEMA},
            },
            CallContext(),
        )
        assert chat["response_format"]["json_schema"]["schema"] == JSON_SCHEMA
        assert [t["function"]["parameters"] for t in chat["tools"]] == [JSON_SCHEMA] * 2


@pytest.mark.slow
def test_upper_case_schemas_reach_the_real_vllm(
    gateway: str, tap: Any, base_settings: Settings, storage: Storage
) -> None:
    """Before: vLLM answered 400 "Invalid type: OBJECT"; now the gateway sends JSON Schema.
    A response schema is guided decoding (off-policy): the default gateway refuses it, one
    with POLAR_OFF_POLICY=record_untrainable sends it on and records it untrainable."""
    import uuid

    from polar.session_keys import SessionIdentity, mint_session_key
    from proxy.app import create_app
    from tests.support import serve_app

    session = f"s-gschema-{uuid.uuid4().hex[:10]}"
    key = mint_session_key(SessionIdentity(session, "task-gschema"), base_settings.session_secret)
    refused = client_for(gateway, key, api_version="v1beta")
    with pytest.raises(errors.ClientError) as caught:
        refused.models.generate_content(
            model="policy",
            contents="Is the sky blue?",
            config=types.GenerateContentConfig(
                response_mime_type="application/json", response_json_schema=GEMINI_SCHEMA
            ),
        )
    assert caught.value.code == 400 and "POLAR_OFF_POLICY" in str(caught.value)
    untrainable = base_settings.model_copy(
        update={"upstream_urls": tap.url, "off_policy": "record_untrainable"}
    )
    with serve_app(create_app(untrainable, storage)) as url:
        _upper_case_schemas(client_for(url, key, api_version="v1beta"))
    records = storage.list_completions(session)
    assert [r.status_code for r in records] == [200, 200]
    assert all(r.untrainable and "response_format" in r.untrainable for r in records)
    sent = records[0].normalized_request
    assert sent["response_format"]["json_schema"]["schema"]["type"] == "object"
    assert records[1].normalized_request["tools"][1]["function"]["parameters"] == JSON_SCHEMA


def _upper_case_schemas(client: genai.Client) -> None:
    schema = types.Schema(
        type=types.Type.OBJECT,
        properties={
            "answer": types.Schema(type=types.Type.STRING, enum=["yes", "no"]),
            "count": types.Schema(type=types.Type.INTEGER, nullable=True),
        },
        required=["answer"],
    )
    tool = types.Tool(
        function_declarations=[
            types.FunctionDeclaration(name="decide", parameters=schema),
            types.FunctionDeclaration(name="decide_raw", parameters_json_schema=GEMINI_SCHEMA),
        ]
    )
    settings = {"max_output_tokens": 12, "tools": [tool], "temperature": 0.0}
    for extra in ({"response_schema": schema}, {"response_json_schema": GEMINI_SCHEMA}):
        answer = client.models.generate_content(
            model="policy",
            contents="Is the sky blue?",
            config=types.GenerateContentConfig(
                response_mime_type="application/json",
                automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
                **settings,  # type: ignore[arg-type]
                **extra,  # type: ignore[arg-type]
            ),
        )
        assert answer.candidates


def test_a_command_harness_env_alone_configures_the_sdk(
    base_settings: Settings, storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `command` harness's environment is all a google-genai client needs: `genai.Client()`
    with no arguments reaches the gateway and its call is recorded under the session."""
    from activities.harnesses.command import gateway_env

    with stack(base_settings, [text("Hello from the env.")]) as (backend, gateway):
        identity, key = gateway.session()
        env = gateway_env(
            gateway_url=gateway.url,
            api_key=key,
            model="gemini-policy",
            session_id=identity.session_id,
            task_id=identity.task_id,
        )
        for name in ("GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
            monkeypatch.setenv(name, env[name])
        client = genai.Client()
        answer = client.models.generate_content(model=env["GEMINI_MODEL"], contents="Hi")
        assert answer.text == "Hello from the env."
        [record] = storage.list_completions(identity.session_id)
        assert record.provider == "google_generate" and record.status_code == 200

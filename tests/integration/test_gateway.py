"""The gateway proxy against a scripted vLLM-shaped backend and the real SeaweedFS.

Clients are the official `openai` SDK (or plain httpx where the SDK would
refuse the request); the gateway and the backend each run in a uvicorn
thread on loopback, except the pure-app tests, which use httpx's ASGI transport.
"""

from __future__ import annotations

import json
import re
import secrets
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from polar.providers.base import split_text
from polar.providers.openai_chat import render_chat_stream
from polar.records import CompletionRecord
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage, completion_key
from proxy.app import create_app
from proxy.training_fields import extract, normalize, strip_training_fields
from tests.support import (
    END_OF_TURN,
    ScriptedBackend,
    error,
    logprob_of,
    scripted_backend,
    serve_app,
    text,
    tool_call,
)
from tests.support.ports import refusing_port

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a shell command in the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "List the files."},
]
ADMIN_TOKEN = secrets.token_urlsafe(32)
ERROR_FIELDS = {"message", "type", "param", "code"}


@dataclass
class Gateway:
    """A running gateway: its base URL (no `/v1`) and its settings."""

    url: str
    settings: Settings

    def session(
        self, attempt: int = 1, only_model: str | None = None
    ) -> tuple[SessionIdentity, str]:
        identity = SessionIdentity(
            f"s-{uuid.uuid4().hex[:12]}", "task-gw", attempt, None, only_model
        )
        return identity, mint_session_key(identity, self.settings.session_secret)

    def client(self, key: str, *, v1: bool = True) -> OpenAI:
        base = f"{self.url}/v1" if v1 else self.url
        return OpenAI(base_url=base, api_key=key, max_retries=0, timeout=30)


@contextmanager
def running_gateway(
    base_settings: Settings,
    upstream_urls: list[str],
    storage: Storage | None = None,
    **overrides: Any,
) -> Iterator[Gateway]:
    update = {"upstream_urls": ",".join(upstream_urls)} | overrides
    settings = base_settings.model_copy(update=update)
    with serve_app(create_app(settings, storage)) as url:
        yield Gateway(url, settings)


@contextmanager
def stack(
    base_settings: Settings, replies: list[Any], **overrides: Any
) -> Iterator[tuple[ScriptedBackend, Gateway]]:
    with (
        scripted_backend(replies) as backend,
        running_gateway(base_settings, [backend.url], **overrides) as gateway,
    ):
        yield backend, gateway


def assert_recorded_exactly(record: CompletionRecord, answer: dict[str, Any]) -> None:
    """The record holds exactly the ids and logprobs the backend produced in `answer`."""
    choice = answer["choices"][0]
    assert record.prompt_token_ids == answer["prompt_token_ids"]
    assert record.response_token_ids == choice["token_ids"]
    assert record.response_logprobs == [c["logprob"] for c in choice["logprobs"]["content"]]
    assert record.finish_reason == choice["finish_reason"]
    assert record.has_token_ids
    assert record.response == answer


def assert_training_fields_absent(raw: dict[str, Any]) -> None:
    assert "prompt_token_ids" not in raw
    for choice in raw["choices"]:
        assert "token_ids" not in choice
        assert choice.get("logprobs") is None


def assert_openai_error(body: Any, code: str | None = None) -> dict[str, Any]:
    assert isinstance(body, dict) and set(body) == {"error"}, body
    assert set(body["error"]) == ERROR_FIELDS, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]


# --------------------------------------------------------------------------- happy paths


def test_non_streaming_answer_is_recorded_before_the_client_gets_it(
    base_settings: Settings, storage: Storage
) -> None:
    with stack(base_settings, [text("Hello from the policy.")]) as (backend, gateway):
        identity, key = gateway.session(attempt=2)
        raw = gateway.client(key).chat.completions.with_raw_response.create(
            model="harness-model-name", messages=MESSAGES, max_tokens=64
        )
        # read S3 right away, no polling: the gateway wrote before answering
        records = storage.list_completions(identity.session_id)
        completion = raw.parse()

    assert completion.choices[0].message.content == "Hello from the policy."
    assert completion.choices[0].finish_reason == "stop"
    assert len(records) == 1
    record = records[0]
    assert_recorded_exactly(record, backend.responses[0])
    assert record.response_token_ids == [*b"Hello from the policy.", END_OF_TURN]
    assert record.response_logprobs == [
        logprob_of(i, t) for i, t in enumerate(record.response_token_ids)
    ]
    # identity, layout and request copies
    assert (record.session_id, record.task_id) == (identity.session_id, "task-gw")
    assert record.attempt == 2
    assert re.fullmatch(rf"\d{{20}}-{record.gateway_id}-\d+", record.record_id)
    assert record.record_id.startswith(f"{record.seq:020d}-")
    key_in_s3 = completion_key(identity.session_id, record.record_id)
    assert key_in_s3.startswith(f"sessions/{identity.session_id}/completions/")
    assert storage.exists(key_in_s3)
    assert record.request == {"model": "harness-model-name", "messages": MESSAGES, "max_tokens": 64}
    assert record.normalized_request == backend.requests[0]
    assert record.status_code == 200 and record.error is None
    assert record.started_at <= record.finished_at
    # training fields went upstream, and not back to the client
    sent = backend.requests[0]
    assert sent["logprobs"] is True and sent["top_logprobs"] == 0
    assert sent["return_token_ids"] is True
    assert sent["model"] == "policy"
    assert "stream" not in sent and "stream_options" not in sent
    assert_training_fields_absent(raw.http_response.json())


def test_streaming_text_with_usage(base_settings: Settings, storage: Storage) -> None:
    content = "The quick brown fox jumps over the lazy dog."
    with stack(base_settings, [text(content)]) as (backend, gateway):
        identity, key = gateway.session()
        stream = gateway.client(key).chat.completions.create(
            model="policy",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        records = storage.list_completions(identity.session_id)

    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks if c.choices]
    pieces = [p for p in pieces if p]
    assert len(pieces) > 1 and "".join(pieces) == content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    sampled = backend.responses[0]["choices"][0]["token_ids"]
    assert chunks[-1].usage.completion_tokens == len(sampled)
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1

    sent = backend.requests[0]
    assert "stream" not in sent and "stream_options" not in sent
    assert len(records) == 1
    assert_recorded_exactly(records[0], backend.responses[0])
    assert records[0].request["stream"] is True


def test_tool_call_streamed_then_tool_result(base_settings: Settings, storage: Storage) -> None:
    arguments = {"command": "ls -la /workspace"}
    replies = [tool_call("run_shell", arguments), text("There are two files.")]
    with stack(base_settings, replies) as (backend, gateway):
        identity, key = gateway.session()
        client = gateway.client(key)
        chunks = list(
            client.chat.completions.create(
                model="policy", messages=MESSAGES, tools=TOOLS, stream=True
            )
        )
        # the SDK's own accumulator must rebuild the same call from our chunks
        tool_deltas = [
            d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])
        ]
        first, rest = tool_deltas[0], tool_deltas[1:]
        call_id = first.id
        followup = [
            *MESSAGES,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "run_shell", "arguments": json.dumps(arguments)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": "a.py\nb.py\n"},
        ]
        with client.chat.completions.stream(
            model="policy", messages=followup, tools=TOOLS
        ) as stream:
            final = stream.get_final_completion()
        records = storage.list_completions(identity.session_id)

    expected_call = backend.responses[0]["choices"][0]["message"]["tool_calls"][0]
    assert first.index == 0 and first.type == "function"
    assert first.id == expected_call["id"]
    assert first.function is not None and first.function.name == "run_shell"
    assert all(d.id is None and d.function and d.function.name is None for d in rest)
    streamed_args = "".join((d.function.arguments or "") for d in tool_deltas if d.function)
    assert json.loads(streamed_args) == arguments
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"

    assert final.choices[0].message.content == "There are two files."
    assert final.choices[0].finish_reason == "stop"
    assert backend.requests[0]["tools"] == TOOLS
    assert backend.requests[1]["messages"][-1]["role"] == "tool"

    assert [r.request["messages"] for r in records] == [MESSAGES, followup]
    assert records[0].seq < records[1].seq
    for record, answer in zip(records, backend.responses, strict=True):
        assert_recorded_exactly(record, answer)
    assert records[0].finish_reason == "tool_calls"


def test_non_streaming_tool_call_and_reasoning(base_settings: Settings, storage: Storage) -> None:
    replies = [
        tool_call("run_shell", {"command": "pwd"}, reasoning="I should look around."),
        text("Done.", reasoning="The listing is enough."),
    ]
    with stack(base_settings, replies) as (backend, gateway):
        identity, key = gateway.session()
        client = gateway.client(key)
        completion = client.chat.completions.create(model="policy", messages=MESSAGES, tools=TOOLS)
        chunks = list(
            client.chat.completions.create(model="policy", messages=MESSAGES, stream=True)
        )
        records = storage.list_completions(identity.session_id)

    call = completion.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.type == "function"
    assert call.function.name == "run_shell"
    assert json.loads(call.function.arguments) == {"command": "pwd"}
    assert completion.choices[0].finish_reason == "tool_calls"
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        for c in chunks
        if c.choices
    )
    assert reasoning == "The listing is enough."
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Done."
    assert len(records) == 2
    for record, answer in zip(records, backend.responses, strict=True):
        assert_recorded_exactly(record, answer)


def test_caller_asking_for_logprobs_keeps_them(base_settings: Settings, storage: Storage) -> None:
    with stack(base_settings, [text("abc")]) as (backend, gateway):
        _, key = gateway.session()
        completion = gateway.client(key).chat.completions.create(
            model="policy", messages=MESSAGES, logprobs=True, top_logprobs=3
        )
    assert backend.requests[0]["top_logprobs"] == 3
    assert completion.choices[0].logprobs is not None
    content = completion.choices[0].logprobs.content or []
    assert [c.logprob for c in content] == [
        c["logprob"] for c in backend.responses[0]["choices"][0]["logprobs"]["content"]
    ]
    assert "token_ids" not in (completion.choices[0].model_extra or {})


def test_answer_without_token_ids_is_still_answered_and_recorded(
    base_settings: Settings, storage: Storage
) -> None:
    with stack(base_settings, [text("no ids here", omit_token_ids=True)]) as (_, gateway):
        identity, key = gateway.session()
        completion = gateway.client(key).chat.completions.create(model="p", messages=MESSAGES)
        records = storage.list_completions(identity.session_id)
    assert completion.choices[0].message.content == "no ids here"
    assert len(records) == 1
    assert not records[0].has_token_ids
    assert records[0].prompt_token_ids is None and records[0].response_token_ids is None
    assert records[0].response_logprobs is not None  # logprobs were still there


def test_paths_without_v1_and_other_key_headers(base_settings: Settings, storage: Storage) -> None:
    with stack(base_settings, [text("one"), text("two"), text("three")]) as (_, gateway):
        identity, key = gateway.session()
        no_v1 = gateway.client(key, v1=False).chat.completions.create(
            model="policy", messages=MESSAGES
        )
        body = {"model": "policy", "messages": MESSAGES}
        by_x_api_key = httpx.post(
            f"{gateway.url}/v1/chat/completions", json=body, headers={"x-api-key": key}
        )
        by_polar_header = httpx.post(
            f"{gateway.url}/chat/completions",
            json=body,
            headers={"Authorization": "Bearer dummy", "X-Polar-Session-Key": key},
        )
        records = storage.list_completions(identity.session_id)
    assert no_v1.choices[0].message.content == "one"
    assert by_x_api_key.status_code == 200, by_x_api_key.text
    assert by_x_api_key.json()["choices"][0]["message"]["content"] == "two"
    assert by_polar_header.status_code == 200, by_polar_header.text
    assert len(records) == 3


def test_models_and_health(base_settings: Settings, storage: Storage) -> None:
    with stack(base_settings, []) as (_, gateway):
        _, key = gateway.session()
        models = gateway.client(key).models.list()
        bare = httpx.get(f"{gateway.url}/models")
    assert [m.id for m in models.data] == ["policy"]
    assert bare.json()["data"][0]["id"] == "policy"


def test_admin_metrics_health_and_docs_only_on_the_admin_port(
    base_settings: Settings, storage: Storage
) -> None:
    """The model port harnesses reach serves the provider APIs and probes, nothing else;
    admin, metrics (which name live sessions), health (which names upstreams) and the docs
    answer on the admin listener."""
    settings = base_settings.model_copy(
        update={"upstream_urls": "http://127.0.0.1:9/v1", "admin_token": ADMIN_TOKEN}
    )
    app = create_app(settings, storage)
    admin_paths = ["/admin/status", "/metrics", "/health", "/docs", "/openapi.json", "/redoc"]
    with serve_app(app) as url, serve_app(app.state.admin_app) as admin:
        for path in [*admin_paths, "/v1/admin/status", "/v1/metrics", "/v1/health"]:
            answer = httpx.get(f"{url}{path}")
            assert answer.status_code == 404, (path, answer.text)
            assert answer.json()["error"]["code"] == "not_found"  # in the caller's shape
        assert httpx.get(f"{url}/v1").status_code == 200  # probes stay
        auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        assert httpx.get(f"{admin}/admin/status", headers=auth).json()["paused"] is False
        assert "polar_gateway_calls_total" in httpx.get(f"{admin}/metrics").text
        health = httpx.get(f"{admin}/health").json()
        assert health["status"] == "ok" and health["upstreams"] == ["http://127.0.0.1:9/v1"]
        schema = httpx.get(f"{admin}/openapi.json").json()
        assert "/v1/chat/completions" in schema["paths"]
        assert "swagger" in httpx.get(f"{admin}/docs").text.lower()
        assert httpx.post(f"{admin}/v1/chat/completions", json={}).status_code == 404


def test_round_robin_and_failover(base_settings: Settings, storage: Storage) -> None:
    with (
        refusing_port() as port,  # a free_port() would be free for the gateway too
        scripted_backend([text(f"a{i}") for i in range(4)]) as one,
        scripted_backend([text(f"b{i}") for i in range(4)]) as two,
        running_gateway(
            base_settings,
            [one.url, f"http://127.0.0.1:{port}/v1", two.url],
            upstream_routing="round_robin",  # affine routing keeps a session on one
        ) as gateway,
    ):
        identity, key = gateway.session()
        client = gateway.client(key)
        with ThreadPoolExecutor(6) as pool:
            answers = list(
                pool.map(
                    lambda _: client.chat.completions.create(model="p", messages=MESSAGES),
                    range(6),
                )
            )
        records = storage.list_completions(identity.session_id)
    assert all(a.choices[0].message.content for a in answers)
    assert len(one.requests) + len(two.requests) == 6
    assert len(one.requests) >= 2 and len(two.requests) >= 2
    assert len(records) == 6 and len({r.record_id for r in records}) == 6
    assert all(r.has_token_ids for r in records)


# --------------------------------------------------------------------------- failures


def test_missing_and_forged_keys_get_401(base_settings: Settings, storage: Storage) -> None:
    with stack(base_settings, [text("never")]) as (backend, gateway):
        identity, good = gateway.session()
        forged = mint_session_key(identity, "not-the-secret")
        payload, mac = good.removeprefix("pk-").split(".")
        other = mint_session_key(SessionIdentity("s-victim", "task-gw"), "x").split(".")[0]
        spliced = f"{other}.{mac}"  # someone else's session with this session's signature
        for key in (forged, spliced, "dummy", "sk-proj-123"):
            with pytest.raises(openai.AuthenticationError) as caught:
                gateway.client(key).chat.completions.create(model="p", messages=MESSAGES)
            assert caught.value.status_code == 401
            err = assert_openai_error(caught.value.response.json(), "invalid_api_key")
            assert err["type"] == "invalid_request_error"
        missing = httpx.post(
            f"{gateway.url}/v1/chat/completions", json={"model": "p", "messages": MESSAGES}
        )
        with pytest.raises(openai.AuthenticationError) as caught:
            gateway.client("unused").chat.completions.create(
                model="p", messages=MESSAGES, extra_headers={"Authorization": openai.Omit()}
            )
        assert "Authorization" not in caught.value.request.headers
        assert_openai_error(caught.value.response.json(), "invalid_api_key")
    assert missing.status_code == 401
    assert_openai_error(missing.json(), "invalid_api_key")
    assert backend.requests == []
    assert storage.count_completions(identity.session_id) == 0
    assert storage.count_completions("s-victim") == 0


def test_upstream_down_gives_502_and_a_failed_record(
    base_settings: Settings, storage: Storage
) -> None:
    with (
        refusing_port() as port,
        running_gateway(base_settings, [f"http://127.0.0.1:{port}/v1"]) as gateway,
    ):
        identity, key = gateway.session()
        with pytest.raises(openai.InternalServerError) as caught:
            gateway.client(key).chat.completions.create(model="p", messages=MESSAGES, stream=True)
        records = storage.list_completions(identity.session_id)
    assert caught.value.status_code == 502
    err = assert_openai_error(caught.value.response.json(), "upstream_unreachable")
    assert "Traceback" not in err["message"]
    assert len(records) == 1
    record = records[0]
    assert record.status_code == 502 and record.error and "no upstream reachable" in record.error
    assert record.response is None and not record.has_token_ids
    assert record.request["stream"] is True and "stream" not in record.normalized_request


def test_upstream_errors_keep_their_meaning(base_settings: Settings, storage: Storage) -> None:
    too_long = "This model's maximum context length is 4096 tokens."
    replies = [error(400, too_long), error(500, "boom")]
    with stack(base_settings, replies) as (_, gateway):
        identity, key = gateway.session()
        client = gateway.client(key)
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(model="p", messages=MESSAGES)
        with pytest.raises(openai.InternalServerError) as broken:
            client.chat.completions.create(model="p", messages=MESSAGES)
        records = storage.list_completions(identity.session_id)
    assert bad.value.status_code == 400  # an overflow, in OpenAI's words (test_gateway_overflow)
    err = assert_openai_error(bad.value.response.json(), "context_length_exceeded")
    assert err["message"].startswith("This model's maximum context length is 4096 tokens.")
    assert broken.value.status_code == 502
    assert "boom" in assert_openai_error(broken.value.response.json(), "upstream_error")["message"]
    assert [r.status_code for r in records] == [400, 502]
    assert records[0].response is not None and records[0].response["error"]["code"] == 400


def test_upstream_timeout_gives_504(base_settings: Settings, storage: Storage) -> None:
    with stack(base_settings, [text("late", delay_s=1.0)], upstream_timeout_s=0.2) as (_, gateway):
        identity, key = gateway.session()
        with pytest.raises(openai.APIStatusError) as caught:
            gateway.client(key).chat.completions.create(model="p", messages=MESSAGES)
        records = storage.list_completions(identity.session_id)
    assert caught.value.status_code == 504
    assert_openai_error(caught.value.response.json(), "upstream_timeout")
    assert [r.status_code for r in records] == [504]


def test_unrecorded_answer_is_never_given(base_settings: Settings, storage: Storage) -> None:
    # S3 refuses every write: keys it does not know
    broken = Storage(base_settings.model_copy(update={"s3_secret_key": "not-the-real-key"}))
    with (
        scripted_backend([text("you must not see this")]) as backend,
        running_gateway(base_settings, [backend.url], storage=broken) as gateway,
    ):
        _, key = gateway.session()
        with pytest.raises(openai.APIStatusError) as caught:
            gateway.client(key).chat.completions.create(model="p", messages=MESSAGES, stream=True)
    assert len(backend.requests) == 1  # upstream answered, but S3 refused the record
    assert caught.value.status_code == 503
    body = caught.value.response.json()
    assert_openai_error(body, "recording_failed")
    assert "you must not see this" not in json.dumps(body)


async def test_bad_requests_get_400_in_openai_shape(base_settings: Settings) -> None:
    settings = base_settings.model_copy(update={"upstream_urls": "http://127.0.0.1:9/v1"})
    app = create_app(settings, Storage(settings))
    key = mint_session_key(SessionIdentity("s-bad", "t"), settings.session_secret)
    headers = {"Authorization": f"Bearer {key}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        url = "/v1/chat/completions"
        json_type = {"content-type": "application/json"}
        bad_json = await client.post(url, content=b"{not json", headers=headers | json_type)
        no_messages = await client.post(url, json={"model": "p"}, headers=headers)
        not_object = await client.post("/chat/completions", json=[1, 2], headers=headers)
        unknown = await client.get("/v1/nope")
        wrong_method = await client.get("/v1/chat/completions")
    assert bad_json.status_code == 400
    assert_openai_error(bad_json.json(), "invalid_json")
    assert no_messages.status_code == 400
    assert assert_openai_error(no_messages.json())["param"] == "messages"
    assert not_object.status_code == 400
    assert unknown.status_code == 404
    assert_openai_error(unknown.json(), "not_found")
    assert wrong_method.status_code == 405
    assert_openai_error(wrong_method.json())


async def test_unexpected_errors_are_openai_shaped_500s(
    base_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = base_settings.model_copy(update={"upstream_urls": "http://127.0.0.1:9/v1"})
    app = create_app(settings, Storage(settings))

    def explode(_: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(app.state.upstream, "normalize", explode)
    key = mint_session_key(SessionIdentity("s-bug", "t"), settings.session_secret)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        answer = await client.post(
            "/v1/chat/completions",
            json={"messages": MESSAGES},
            headers={"Authorization": f"Bearer {key}"},
        )
    assert answer.status_code == 500
    assert answer.headers["content-type"] == "application/json"
    err = assert_openai_error(answer.json(), "internal_error")
    assert "Traceback" not in err["message"] and "a bug" not in err["message"]


# --------------------------------------------------------------------------- pure parts


def test_normalize_by_backend_kind() -> None:
    request = {
        "model": "harness",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
        "top_logprobs": 5,
    }
    vllm = normalize(request, "vllm", "policy")
    assert vllm["model"] == "policy" and vllm["top_logprobs"] == 5
    assert vllm["logprobs"] is True and vllm["return_token_ids"] is True
    assert "stream" not in vllm and "stream_options" not in vllm
    assert normalize({"messages": MESSAGES}, "vllm", None) == {
        "messages": MESSAGES,
        "logprobs": True,
        "top_logprobs": 0,
        "return_token_ids": True,
    }
    sglang = normalize({"model": "m", "messages": MESSAGES}, "sglang", None)
    assert sglang == {
        "model": "m",
        "messages": MESSAGES,
        "logprobs": True,
        "return_prompt_token_ids": True,
        "return_token_ids": True,
        "return_meta_info": True,
    }
    assert request["stream"] is True  # the caller's request is left as it was
    with pytest.raises(ValueError):
        normalize(request, "tgi", None)


def test_extract_sglang_and_strip() -> None:
    body = {
        "model": "policy",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi"},
                "finish_reason": "stop",
                "prompt_token_ids": [1, 2, 3],
                "token_ids": [7, 8],
                "meta_info": {"output_token_logprobs": [[-0.5, 7, "h"], [-0.25, 8, "i"]]},
                "logprobs": {"content": [{"token": "h", "logprob": -0.5}]},
            }
        ],
    }
    got = extract(body, "sglang")
    assert got.prompt_token_ids == [1, 2, 3] and got.response_token_ids == [7, 8]
    assert got.response_logprobs == [-0.5, -0.25] and got.finish_reason == "stop"
    assert got.has_token_ids and got.model == "policy"
    no_ids = json.loads(json.dumps(body))
    del no_ids["choices"][0]["token_ids"]
    assert extract(no_ids, "sglang").response_token_ids == [7, 8]  # from meta_info
    assert not extract({"choices": [{"message": {}}]}, "vllm").has_token_ids
    stripped = strip_training_fields(body, {"messages": MESSAGES})
    assert set(stripped["choices"][0]) == {"index", "message", "finish_reason", "logprobs"}
    assert stripped["choices"][0]["logprobs"] is None
    assert body["choices"][0]["token_ids"] == [7, 8]  # the original is untouched


def test_stream_rendering_shape() -> None:
    assert split_text("") == [] and "".join(split_text("abcdefghij")) == "abcdefghij"
    answer = {
        "id": "chatcmpl-1",
        "created": 1,
        "model": "policy",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hello world"},
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    events = list(render_chat_stream(answer, include_usage=False))
    assert events[-1] == "data: [DONE]\n\n"
    assert all(e.startswith("data: ") and e.endswith("\n\n") for e in events)
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"

"""Bad input at the gateway: oversized bodies, schemathesis on its OpenAPI schema, wrong bodies.

Every answer must be below 500, and every error must be in the caller's own
shape (OpenAI, Anthropic or Google, by path and headers) and say what is wrong.
The upstream is a scripted vLLM-shaped backend on loopback that always
answers, and completions are recorded into memory, so any 5xx is the gateway's.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polar.providers import detect
from polar.records import CompletionRecord
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from proxy.app import create_app
from tests.support.scripted_backend import ScriptedBackend, backend_app, serve_app, text

SECRET = secrets.token_urlsafe(32)
EXAMPLES = int(os.environ.get("POLAR_FUZZ_EXAMPLES", "50"))  # per operation / per provider
LIMIT = 64 * 1024  # a small body limit, so "oversized" stays cheap to send


class MemoryStorage:
    """Where the recorder puts completions in these tests (only what it calls)."""

    def __init__(self) -> None:
        self.records: list[CompletionRecord] = []

    def put_completion(self, record: CompletionRecord) -> str:
        self.records.append(record)
        return f"memory/{len(self.records)}"

    def closed_markers(self, session_id: str) -> set[str]:
        return set()  # no session of these tests ever closes


class EndlessBackend(ScriptedBackend):
    """A scripted backend that always has one more plain-text reply."""

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        self.replies.append(text("ok"))
        self.requests.clear()  # bounded memory, whatever the number of examples
        try:
            return super().answer(body)
        except Exception:  # the stand-in's own prompt rendering choked on an odd (valid) body
            self.replies.append(text("ok"))
            return super().answer({"messages": []})


@pytest.fixture(scope="module")
def backend() -> Iterator[EndlessBackend]:
    from collections import deque

    handle = EndlessBackend(url="", replies=deque())
    with serve_app(backend_app(handle)) as base:
        handle.url = f"{base}/v1"
        yield handle


@pytest.fixture(scope="module")
def fuzz_settings(backend: EndlessBackend) -> Settings:
    return Settings(
        upstream_urls=backend.url,
        session_secret=SECRET,
        max_body_bytes=LIMIT,
        upstream_timeout_s=30,
        s3_endpoint="http://127.0.0.1:9",  # never used: records go to memory
    )


@pytest.fixture(scope="module")
def gateway_url(fuzz_settings: Settings) -> Iterator[str]:
    with serve_app(create_app(fuzz_settings, MemoryStorage())) as url:  # type: ignore[arg-type]
        yield url


def session_key() -> str:
    identity = SessionIdentity(f"s-fuzz-{uuid.uuid4().hex[:8]}", "task-fuzz", 1)
    return mint_session_key(identity, SECRET)


# --------------------------------------------------------------------------- caller's shape


def error_message(provider: str, body: Any) -> str:
    """The message of an error body in `provider`'s shape; AssertionError if not that shape."""
    assert isinstance(body, dict), body
    if provider == "anthropic_messages":
        assert body.get("type") == "error", body
        err = body["error"]
        assert isinstance(err.get("type"), str), body
    elif provider == "google_generate":
        err = body["error"]
        assert isinstance(err.get("code"), int) and isinstance(err.get("status"), str), body
    else:  # both OpenAI APIs
        err = body["error"]
        assert {"message", "type", "param", "code"} <= set(err), body
    assert isinstance(err["message"], str) and err["message"].strip(), body
    return err["message"]


def assert_caller_shaped(path: str, headers: Any, status: int, raw: bytes) -> None:
    assert status < 500, f"{status} on {path}: {raw[:500]!r}"
    if status >= 400:
        provider = detect(path, headers).name
        error_message(provider, json.loads(raw))


# --------------------------------------------------------------------------- oversized bodies

OVERSIZED_ROUTES = [
    ("/v1/chat/completions", {}, "openai_chat"),
    ("/v1/responses", {}, "openai_responses"),
    ("/v1/messages", {"anthropic-version": "2023-06-01"}, "anthropic_messages"),
    ("/v1beta/models/policy:generateContent", {}, "google_generate"),
]


@pytest.mark.parametrize(("path", "extra", "provider"), OVERSIZED_ROUTES)
def test_oversized_body_is_refused_in_callers_shape(
    gateway_url: str, path: str, extra: dict[str, str], provider: str
) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "x" * (LIMIT * 2)}]})
    headers = {"Authorization": f"Bearer {session_key()}", **extra}
    r = httpx.post(gateway_url + path, content=body, headers=headers, timeout=30)
    assert r.status_code == 413
    message = error_message(provider, r.json())
    assert str(LIMIT) in message and "POLAR_MAX_BODY_BYTES" in message


def test_chunked_oversized_body_is_cut_off_while_reading(gateway_url: str) -> None:
    """No Content-Length: the gateway counts the chunks and stops at the limit."""
    sent = 0
    total = LIMIT * 64  # 4 MiB offered; the gateway must answer long before reading it all

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        yield b'{"messages": [{"role": "user", "content": "'
        while sent < total:
            sent += 16 * 1024
            yield b"y" * (16 * 1024)
        yield b'"}]}'

    headers = {"Authorization": f"Bearer {session_key()}", "x-goog-api-key": "ignored"}
    try:
        r = httpx.post(gateway_url + "/v1/chat/completions", content=chunks(), headers=headers)
    except (httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadError):
        pytest.skip("the server closed before the client read its answer (platform-dependent)")
    assert r.status_code == 413
    assert "request_too_large" in r.text and str(LIMIT) in r.text
    assert r.json()["error"]["code"] == "request_too_large"  # OpenAI's shape (its path)


def test_chunked_oversized_body_raw_socket(gateway_url: str) -> None:
    """The same on the wire: chunked encoding, an Anthropic call, the 413 comes back mid-upload."""
    host, port = gateway_url.removeprefix("http://").split(":")
    head = (
        "POST /v1/messages HTTP/1.1\r\n"
        f"Host: {host}\r\nx-api-key: {session_key()}\r\nanthropic-version: 2023-06-01\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b"z" * 8192
    answer = b""
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head)
        deadline = time.monotonic() + 20
        sent = 0
        sock.settimeout(0.05)
        while time.monotonic() < deadline and sent < 64 * LIMIT and b"\r\n\r\n" not in answer:
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            except OSError:
                break
            with contextlib.suppress(TimeoutError):
                answer += sock.recv(65536)
        sock.settimeout(10)
        while b"}" not in answer.partition(b"\r\n\r\n")[2]:  # the whole (small) JSON body
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < 8 * LIMIT, f"the gateway read {sent} bytes before refusing"
    assert b'"type":"error"' in answer.replace(b" ", b"")  # Anthropic's shape


def test_body_under_the_limit_still_served(gateway_url: str) -> None:
    body = {"model": "policy", "messages": [{"role": "user", "content": "a" * (LIMIT // 2)}]}
    headers = {"Authorization": f"Bearer {session_key()}"}
    r = httpx.post(gateway_url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "ok"


# --------------------------------------------------------------------------- schemathesis


def gateway_operations() -> list[Any]:
    """The operations of the gateway's /openapi.json, as schemathesis loads them."""
    app = create_app(Settings(s3_endpoint="http://127.0.0.1:9"), MemoryStorage())  # type: ignore[arg-type]
    schema = schemathesis.openapi.from_dict(app.openapi())
    return [result.ok() for result in schema.get_all_operations()]


OPERATIONS = gateway_operations()


@pytest.mark.slow
@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_schemathesis_gateway(operation: Any, gateway_url: str) -> None:
    """Every operation of /openapi.json, fuzzed: never a 5xx, every error in the caller's shape.

    (schemathesis's own pytest loader is not used: it does not run on this pytest.)
    """
    headers = {"Authorization": f"Bearer {session_key()}"}

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        response = case.call(base_url=gateway_url, headers=headers, timeout=30)
        request = response.request
        path = httpx.URL(str(request.url)).path
        assert_caller_shaped(path, request.headers, response.status_code, response.content)

    run()


def test_openapi_schema_documents_provider_bodies(fuzz_settings: Settings) -> None:
    app = create_app(fuzz_settings, MemoryStorage())  # type: ignore[arg-type]
    paths = app.openapi()["paths"]
    for path, required in [
        ("/v1/chat/completions", "messages"),
        ("/v1/responses", "input"),
        ("/v1/messages", "messages"),
        ("/v1beta/models/{target}", "contents"),
    ]:
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert required in body["required"]
    ids = [op["operationId"] for ops in paths.values() for op in ops.values()]
    assert len(ids) == len(set(ids))


# --------------------------------------------------------------------------- wrong bodies

VALID: dict[str, tuple[str, dict[str, str], dict[str, Any]]] = {
    "openai_chat": (
        "/v1/chat/completions",
        {},
        {"model": "policy", "messages": [{"role": "user", "content": "hi"}]},
    ),
    "openai_responses": ("/v1/responses", {}, {"model": "policy", "input": "hi"}),
    "anthropic_messages": (
        "/v1/messages",
        {"anthropic-version": "2023-06-01"},
        {"model": "policy", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "google_generate": (
        "/v1beta/models/policy:generateContent",
        {},
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    ),
}
# the fields each API reads, and wrong values for them
FIELDS = {
    "openai_chat": ["messages", "tools", "tool_choice", "stream", "max_tokens", "model"],
    "openai_responses": ["input", "instructions", "tools", "tool_choice", "stream", "model"],
    "anthropic_messages": ["messages", "system", "tools", "tool_choice", "stream", "max_tokens"],
    "google_generate": ["contents", "systemInstruction", "tools", "toolConfig", "generationConfig"],
}
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def mutate(body: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(body))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


@st.composite
def wrong_bodies(draw: st.DrawFn, provider: str) -> tuple[dict[str, Any], str]:
    """A valid body with one field (top-level, or inside the first message) made wrong."""
    _, _, valid = VALID[provider]
    messages_key = {"openai_responses": None, "google_generate": "contents"}.get(
        provider, "messages"
    )
    where = draw(st.sampled_from(["top", "nested"] if messages_key else ["top"]))
    if where == "top":
        field = draw(st.sampled_from(FIELDS[provider]))
        return mutate(valid, [field], draw(json_values)), field
    inner = draw(st.sampled_from(sorted(valid[messages_key][0]) + ["tool_calls", "extra"]))
    return mutate(valid, [messages_key, 0, inner], draw(json_values)), messages_key


@pytest.mark.parametrize("provider", sorted(VALID))
async def test_wrong_provider_bodies_get_caller_shaped_4xx(
    provider: str, fuzz_settings: Settings
) -> None:
    """Structured-but-wrong JSON per provider: a 200, or a 4xx in its shape naming the field."""
    app = create_app(fuzz_settings, MemoryStorage())  # type: ignore[arg-type]
    path, extra, _ = VALID[provider]
    headers = {"Authorization": f"Bearer {session_key()}", **extra}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=30) as client:

        @given(case=wrong_bodies(provider))
        @settings(
            max_examples=EXAMPLES * 3,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: tuple[dict[str, Any], str]) -> None:
            pending.append(case)  # drawn here, sent below (the client is async)

        pending: list[tuple[dict[str, Any], str]] = []
        run()
        for body, field in pending:
            r = await client.post(path, json=body, headers=headers)
            assert_caller_shaped(path, r.request.headers, r.status_code, r.content)
            if r.status_code == 400:
                message = error_message(provider, r.json())
                param = (r.json().get("error") or {}).get("param") or ""
                stem = field.lower().removesuffix("s")  # "each tool needs a 'name'" names tools
                named = stem in (message + " " + param).lower()
                assert named, f"{field!r} not named by {message!r} for {json.dumps(body)[:300]}"
    assert pending

"""Bad input at the gateway: oversized bodies, schemathesis on its OpenAPI schema, wrong bodies.

Every answer must be below 500, and every error must be in the caller's own
shape (OpenAI, Anthropic or Google, by path and headers) and say what is wrong.
The upstream is a scripted vLLM-shaped backend on loopback that always
answers, and completions are recorded into memory, so any 5xx is the gateway's.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import secrets
import socket
import sys
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polar.outcomes import GATEWAY_FAULT_HEADER
from polar.providers import detect
from polar.records import CompletionRecord
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from proxy.app import create_app
from tests.support.scripted_backend import (
    ScriptedBackend,
    backend_app,
    serve_app,
    text,
    tool_call,
)

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
        ("/v1/messages", "max_tokens"),
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
                said = (message + " " + param).lower().replace("_", "")  # Google: snake_case
                named = stem.replace("_", "") in said
                assert named, f"{field!r} not named by {message!r} for {json.dumps(body)[:300]}"
    assert pending


# --------------------------------------------------------------------------- hostile bodies
#
# Structure-breaking input at every field each API reads (wrong types, lone surrogates, deep
# nesting, huge numbers, NaN and infinities, nulls), streamed or not, against answers of every
# kind (text, tool calls, reasoning, cut by length): whatever the caller sends, the gateway
# answers a 200 or a 4xx in the caller's shape, never a 5xx (a 5xx marked as the gateway's own
# fault turns a session the policy lost into infra_error, out of its group's baseline).

RICH: dict[str, dict[str, Any]] = {
    "openai_chat": {
        "model": "policy",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a": 1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "description": "d",
                    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
                },
            }
        ],
        "tool_choice": "auto",
        "stream_options": {"include_usage": True},
        "n": 1,
        "max_tokens": 16,
        "temperature": 0.5,
        "top_p": 1,
        "stop": ["x"],
        "logprobs": False,
        "top_logprobs": 0,
        "seed": 1,
        "user": "u",
        "response_format": {"type": "text"},
        "chat_template_kwargs": {"enable_thinking": False},
        "min_tokens": 0,
    },
    "openai_responses": {
        "model": "policy",
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "g", "input": "x"},
            {
                "type": "custom_tool_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "y"}],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "ok"}],
            },
        ],
        "tools": [
            {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}},
            {
                "type": "custom",
                "name": "g",
                "format": {"type": "grammar", "syntax": "lark", "definition": "x"},
            },
            {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "h"}]},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "max_output_tokens": 16,
        "temperature": 0.5,
        "top_p": 1,
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "text"}},
        "store": False,
        "include": [],
        "metadata": {"a": "b"},
        "truncation": "disabled",
    },
    "anthropic_messages": {
        "model": "policy",
        "max_tokens": 16,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "r"}],
                    }
                ],
            },
        ],
        "tools": [
            {"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {}}}
        ],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": False},
        "stop_sequences": ["x"],
        "temperature": 0.5,
        "top_p": 1,
        "top_k": 5,
        "metadata": {"user_id": "u"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    },
    "google_generate": {
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"r": 1}}}]},
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "f",
                        "description": "d",
                        "parameters": {
                            "type": "OBJECT",
                            "properties": {"a": {"type": "INTEGER", "nullable": True}},
                            "required": ["a"],
                        },
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO", "allowedFunctionNames": ["f"]}},
        "generationConfig": {
            "maxOutputTokens": 16,
            "temperature": 0.5,
            "topP": 1,
            "topK": 5,
            "stopSequences": ["x"],
            "candidateCount": 1,
            "seed": 1,
        },
    },
}
EXTRA_FIELDS = ["stream", "stream_options", "n", "logprobs", "generateContentRequest", "store"]
"""Fields not in the rich bodies that an API (or the gateway) also reads."""


def field_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into `value` (each object key, each array index), outermost first."""
    paths: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, inner in items:
        paths.append((*prefix, key))
        if isinstance(inner, dict | list):
            paths.extend(field_paths(inner, (*prefix, key)))
    return paths


FIELD_PATHS = {
    p: field_paths(body) + [(f,) for f in EXTRA_FIELDS if f not in body] for p, body in RICH.items()
}
MAX_NESTING = 2000
"""The deepest hostile value sent."""
LONE_SURROGATES = ["\ud800", "\udfff", "a\udc00b", "\ud83d", "x" * 40 + "\udbff"]


def nested(depth: int, leaf: Any = 1, kind: str = "list") -> Any:
    """`leaf` inside `depth` arrays (or objects)."""
    for _ in range(depth):
        leaf = [leaf] if kind == "list" else {"k": leaf}
    return leaf


GRID_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**64,
    10**30,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    "\ud800",
    [],
    [None, 1.5],
    {},
    {"\udfff": "x"},
    nested(70),
    nested(900),
    nested(900, kind="dict"),
    nested(MAX_NESTING),
]
"""One value of each hostile class, put at every field path of each API (the grid)."""

hostile_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.text(st.characters(categories=["Cs", "L", "Nd", "Cc"]), min_size=1, max_size=6),
    st.sampled_from(LONE_SURROGATES),
)
hostile_values = st.one_of(
    hostile_scalars,
    st.recursive(
        hostile_scalars,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.text(max_size=5) | st.sampled_from(LONE_SURROGATES), inner, max_size=3
            )
        ),
        max_leaves=6,
    ),
    st.builds(
        nested,
        st.integers(min_value=50, max_value=1500),
        hostile_scalars,
        st.sampled_from(["list", "dict"]),
    ),
)


def put(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A deep copy of `body` with `value` at `path` (the empty path: `value` is the body)."""
    if not path:
        return value
    out = copy.deepcopy(body)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


@dataclass(frozen=True)
class HostileCase:
    path: str
    headers: dict[str, str]
    raw: bytes
    what: str
    kind: str


def hostile_kind(value: Any) -> str:
    """The class of a hostile value, for the figures: the first of surrogate, deep, huge
    number, nan/inf, null that it holds, else a wrong type."""
    found: set[str] = set()
    level, depth = [value], 0
    while level:
        depth += 1
        below: list[Any] = []
        for v in level:
            if isinstance(v, str) and any("\ud800" <= c <= "\udfff" for c in v):
                found.add("surrogate")
            elif v is None:
                found.add("null")
            elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**63:
                found.add("huge number")
            elif isinstance(v, float) and not math.isfinite(v):
                found.add("nan/inf")
            elif isinstance(v, dict):
                below.extend(v.values())
                if any("\ud800" <= c <= "\udfff" for k in v for c in k):
                    found.add("surrogate")
            elif isinstance(v, list):
                below.extend(v)
        level = below
    if depth > 64:
        found.add("deep")
    order = ("surrogate", "deep", "huge number", "nan/inf", "null")
    return next((k for k in order if k in found), "wrong type")


def _call_target(provider: str, stream: bool, count: bool) -> tuple[str, dict[str, str]]:
    if provider == "google_generate":
        action = (
            "countTokens" if count else "streamGenerateContent" if stream else "generateContent"
        )
        return f"/v1beta/models/policy:{action}" + ("?alt=sse" if stream else ""), {}
    if provider == "anthropic_messages":
        path = "/v1/messages/count_tokens" if count else "/v1/messages"
        return path, {"anthropic-version": "2023-06-01"}
    if provider == "openai_responses":
        return ("/v1/responses/input_tokens" if count else "/v1/responses"), {}
    return "/v1/chat/completions", {}


def hostile_case(
    provider: str, where: tuple[Any, ...], value: Any, *, stream: bool, count: bool = False
) -> HostileCase:
    """The rich body of `provider` with `value` at `where`, as the bytes a caller sends:
    lone surrogates as `\\udxxx` escapes, NaN and infinities as JSON's usual extensions."""
    path, headers = _call_target(provider, stream, count and provider != "openai_chat")
    body: Any = RICH[provider]
    if stream and provider != "google_generate":
        body = body | {"stream": True}
    body = put(body, where, value)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + 4 * MAX_NESTING)  # json.dumps recurses into the deep values
    try:
        raw = json.dumps(body, allow_nan=True).encode()
    finally:
        sys.setrecursionlimit(limit)
    return HostileCase(path, headers, raw, ".".join(map(str, where)) or "body", hostile_kind(value))


def grid_cases(provider: str) -> list[HostileCase]:
    """Every field path (and the whole body) x every value of `GRID_VALUES`: a top-level field
    both streamed and not, a nested one streamed for every other value; one in ten a
    token-counting call."""
    cases = []
    for where in [(), *FIELD_PATHS[provider]]:
        for i, value in enumerate(GRID_VALUES):
            modes = (False, True) if len(where) <= 1 else ((i + len(where)) % 2 == 1,)
            for stream in modes:
                count = (i + len(where)) % 10 == 0
                cases.append(hostile_case(provider, where, value, stream=stream, count=count))
    return cases


@st.composite
def hostile_cases(draw: st.DrawFn, provider: str) -> HostileCase:
    """One random hostile call: a random field path (or the body), a random hostile value."""
    where = draw(st.sampled_from([*FIELD_PATHS[provider], ()]))
    stream, count = draw(st.booleans()), draw(st.integers(0, 9)) == 9
    return hostile_case(provider, where, draw(hostile_values), stream=stream, count=count)


class VariedBackend(ScriptedBackend):
    """A vLLM stand-in answering every kind of answer in turn; a body it cannot take gets the
    400 vLLM gives (so a 5xx on the caller's side can only be the gateway's)."""

    KINDS = (
        lambda: text("done x", stop_reason="x"),
        lambda: tool_call("f", {"a": 1}),
        lambda: tool_call("ns__h", '{"q": "r"}'),
        lambda: tool_call("g", {"input": "raw"}),
        lambda: text("thought out", reasoning="because"),
        lambda: text("cut", finish_reason="length"),
    )

    def __init__(self) -> None:
        super().__init__(url="", replies=deque())
        self.turn = 0

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        self.requests.clear()
        self.responses.clear()
        n = body.get("n") if type(body.get("n")) is int else 1
        for _ in range(max(1, min(int(n), 32))):
            self.turn += 1
            self.replies.append(self.KINDS[self.turn % len(self.KINDS)]())
        try:
            return super().answer(body)
        except Exception as exc:  # noqa: BLE001 - what vLLM answers a request it cannot take
            err = {"message": f"invalid request: {exc!r:.100}", "type": "BadRequestError"}
            return 400, {"error": err | {"param": None, "code": 400}}, 0.0
        finally:
            self.replies.clear()


@pytest.fixture(scope="module")
def varied_backend() -> Iterator[VariedBackend]:
    handle = VariedBackend()
    with serve_app(backend_app(handle)) as base:
        handle.url = f"{base}/v1"
        yield handle


@pytest.mark.parametrize("provider", sorted(RICH))
async def test_hostile_bodies_never_get_a_5xx(
    provider: str, varied_backend: VariedBackend, record_property: Any
) -> None:
    """Every API, every field it reads (and the whole body), every structure-breaking value,
    streamed or not, against every kind of answer: a 200 or a caller-shaped 4xx, never a 5xx
    nor the gateway-fault mark. The grid, then `EXAMPLES * 2` random draws."""
    config = Settings(
        upstream_urls=varied_backend.url,
        session_secret=SECRET,
        max_body_bytes=1024 * 1024,
        upstream_timeout_s=30,
        s3_endpoint="http://127.0.0.1:9",  # never used: records go to memory
        off_policy="record_untrainable",  # sampling controls reach the upstream (and its 400s)
    )
    app = create_app(config, MemoryStorage())  # type: ignore[arg-type]
    cases = grid_cases(provider)

    @given(case=hostile_cases(provider))
    @settings(
        max_examples=EXAMPLES * 2,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def draw(case: HostileCase) -> None:
        cases.append(case)  # drawn here, sent below (the client is async)

    draw()
    failures: dict[str, list[str]] = {}
    by_kind: dict[str, dict[int, int]] = {}
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)  # 500s are answered
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=60) as client,
    ):
        for case in cases:
            headers = {"Authorization": f"Bearer {session_key()}", **case.headers}
            headers["content-type"] = "application/json"
            r = await client.post(case.path, content=case.raw, headers=headers)
            seen = by_kind.setdefault(case.kind, {})
            seen[r.status_code] = seen.get(r.status_code, 0) + 1
            try:
                assert GATEWAY_FAULT_HEADER not in r.headers, r.text[:200]
                assert_caller_shaped(case.path, r.request.headers, r.status_code, r.content)
            except (AssertionError, ValueError) as exc:
                summary = f"{case.kind} at {case.what}: {str(exc).splitlines()[0][:200]}"
                failures.setdefault(summary, []).append(f"{case.path} {case.raw[:200]!r}")
    bad = sum(len(v) for v in failures.values())
    record_property("hostile", {"tried": len(cases), "failed": bad, "by_kind": by_kind})
    print(f"{provider}: {len(cases)} hostile calls, {bad} failed; status by kind {by_kind}")
    assert not failures, "\n".join(
        f"{len(v)}x {k}\n   e.g. {v[0]}"
        for k, v in sorted(failures.items(), key=lambda i: -len(i[1]))
    )


HOSTILE_PATHS = [
    "/v1beta/models/%ED%A0%80:generateContent",  # a surrogate's UTF-8 bytes, percent-encoded
    "/v1beta/models/%FF:streamGenerateContent?alt=sse",
    "/v1beta/models/" + "a" * 5000 + ":generateContent",
    "/v1beta/models/:generateContent",
    "/v1beta/models/a%00b:streamGenerateContent?alt=%ED%A0%80",
    "/v1beta/models/x:countTokens?key=%ED%A0%80",
    "/v1beta/models/%ED%A0%80",
    "/v1/models/%ED%A0%80",
    "/v1/chat/completions?x=%ED%A0%80",
    "/v1/messages/count_tokens?beta=%FF",
    "/v1/responses/input_tokens?%00=%00",
]


@pytest.mark.parametrize("method", ["POST", "GET"])
async def test_hostile_paths_never_get_a_5xx(method: str, varied_backend: VariedBackend) -> None:
    """Odd bytes in the path and query (the model name of Google's routes comes from the
    path): a 200 or a caller-shaped 4xx."""
    config = Settings(
        upstream_urls=varied_backend.url, session_secret=SECRET, s3_endpoint="http://127.0.0.1:9"
    )
    app = create_app(config, MemoryStorage())  # type: ignore[arg-type]
    body = json.dumps(RICH["google_generate"]).encode()
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=60) as client,
    ):
        for path in HOSTILE_PATHS:
            headers = {"Authorization": f"Bearer {session_key()}"}
            r = await client.request(method, path, content=body, headers=headers)
            assert GATEWAY_FAULT_HEADER not in r.headers, (path, r.text[:200])
            assert_caller_shaped(httpx.URL(path).path, r.request.headers, r.status_code, r.content)

"""docs/errors.md's gateway bad-input table, row by row (issue 37, item 5).

The table is read from the page; each row's call goes to the real gateway app (a scripted
vLLM-shaped backend behind it, so a call the gateway wrongly takes is served, a 200), and
its answer must have the row's status, be in the caller's own error shape, and hold the
row's message. A row without a case, or a case without a row, fails the test.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from polar.settings import Settings
from proxy.app import create_app
from tests.integration.test_fuzz_gateway import (
    SECRET,
    EndlessBackend,
    MemoryStorage,
    error_message,
    session_key,
)
from tests.support.doc_tables import Row, table_rows
from tests.support.scripted_backend import backend_app, serve_app

TABLE_HEADER = "| case | call | message | status |"
LIMIT = 64 * 1024
ANTHROPIC = ("/v1/messages", {"anthropic-version": "2023-06-01"}, "anthropic_messages")
CHAT = ("/v1/chat/completions", {}, "openai_chat")
RESPONSES = ("/v1/responses", {}, "openai_responses")
GOOGLE = ("/v1beta/models/policy:generateContent", {}, "google_generate")
HI = [{"role": "user", "content": "hi"}]


CASES: dict[str, tuple[tuple[str, dict[str, str], str], dict[str, Any]]] = {
    "anthropic-no-max-tokens": (ANTHROPIC, {"model": "policy", "messages": HI}),
    "anthropic-wrong-role": (
        ANTHROPIC,
        {"max_tokens": 16, "messages": [{"role": "wizard", "content": "hi"}]},
    ),
    "anthropic-block-type": (
        ANTHROPIC,
        {"max_tokens": 16, "messages": [{"role": "user", "content": [{"type": "bogus"}]}]},
    ),
    "anthropic-field-type": (
        ANTHROPIC,
        {"max_tokens": 16, "temperature": "hot", "messages": HI},
    ),
    "chat-wrong-role": (
        CHAT,
        {"model": "policy", "stream": True, "messages": [{"role": "wizard"}]},
    ),
    "chat-no-content": (CHAT, {"messages": [{"role": "user"}]}),
    "chat-part-type": (
        CHAT,
        {"messages": [{"role": "user", "content": [{"type": "video", "video": "x"}]}]},
    ),
    "chat-field-type": (CHAT, {"max_tokens": "16", "messages": HI}),
    "responses-input-type": (RESPONSES, {"model": "policy", "input": 42}),
    "responses-wrong-role": (
        RESPONSES,
        {"model": "policy", "input": [{"role": "wizard", "content": "hi"}]},
    ),
    "responses-no-input": (RESPONSES, {"model": "policy", "instructions": "be brief"}),
    "google-no-contents": (GOOGLE, {"generationConfig": {"temperature": 0.5}}),
    "google-wrong-role": (GOOGLE, {"contents": [{"role": "wizard", "parts": [{"text": "hi"}]}]}),
    "google-field-type": (
        GOOGLE,
        {"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"temperature": "hot"}},
    ),
    "body-too-large": (CHAT, {"messages": [{"role": "user", "content": "x" * (LIMIT + 1)}]}),
}
ROWS = table_rows(TABLE_HEADER)


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.fixture(scope="module")
def backend() -> Iterator[EndlessBackend]:
    handle = EndlessBackend(url="", replies=deque())
    with serve_app(backend_app(handle)) as base:
        handle.url = f"{base}/v1"
        yield handle


@pytest.fixture
async def client(backend: EndlessBackend) -> AsyncIterator[httpx.AsyncClient]:
    config = Settings(
        upstream_urls=backend.url,
        session_secret=SECRET,
        max_body_bytes=LIMIT,
        upstream_timeout_s=30,
        s3_endpoint="http://127.0.0.1:9",  # never used: records go to memory
    )
    app = create_app(config, MemoryStorage())  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=60) as http:
        yield http


def test_every_row_has_a_case_and_every_case_a_row() -> None:
    cases = [r.case for r in ROWS]
    assert len(cases) == len(set(cases)), cases
    assert set(cases) == set(CASES)


@pytest.mark.parametrize("row", ROWS, ids=[r.case for r in ROWS])
async def test_gateway_bad_input_row(row: Row, client: httpx.AsyncClient) -> None:
    (path, extra, provider), body = CASES[row.case]
    headers = {"Authorization": f"Bearer {session_key()}", **extra}
    answer = await client.post(path, json=body, headers=headers)
    assert answer.status_code == int(row.status), answer.text[:300]
    message = error_message(provider, answer.json())  # the caller's own error shape
    assert row.message in flat(message), message

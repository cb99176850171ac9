"""Gateway pause/drain/resume (weight updates) and its Prometheus metrics.

The gateway and a scripted vLLM-shaped backend run in uvicorn threads; calls
are plain httpx against loopback; records land in the real SeaweedFS.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from polar.logs import ContextFilter, JsonFormatter
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from polar.trainers.weights import InPlaceReload
from proxy.app import create_app
from tests.support import error, scripted_backend, serve_app, text
from tests.support.polling import wait_for

TOKEN = secrets.token_urlsafe(32)
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
MESSAGES = [{"role": "user", "content": "hi"}]


@contextmanager
def gateway(
    base_settings: Settings, replies: list[Any], storage: Storage | None = None, **overrides: Any
) -> Iterator[tuple[str, str, Settings]]:
    """The model port's URL, the admin listener's URL, and the settings."""
    with scripted_backend(replies) as backend:
        update = {"upstream_urls": backend.url, "admin_token": TOKEN} | overrides
        settings = base_settings.model_copy(update=update)
        app = create_app(settings, storage)
        with serve_app(app) as url, serve_app(app.state.admin_app) as admin:
            yield url, admin, settings


def session_key(settings: Settings, task_id: str = "task-admin") -> tuple[str, str]:
    session_id = f"s-{uuid.uuid4().hex[:12]}"
    return session_id, mint_session_key(
        SessionIdentity(session_id, task_id, 1), settings.session_secret
    )


async def chat(client: httpx.AsyncClient, url: str, key: str) -> httpx.Response:
    return await client.post(
        f"{url}/v1/chat/completions",
        json={"model": "p", "messages": MESSAGES},
        headers={"Authorization": f"Bearer {key}"},
    )


async def test_pause_drains_in_flight_holds_new_calls_and_resume_releases_them(
    base_settings: Settings, storage: Storage
) -> None:
    replies = [text(f"slow {i}", delay_s=1.5) for i in range(3)] + [text("after resume")]
    with gateway(base_settings, replies) as (url, admin, settings):
        session_id, key = session_key(settings)
        async with httpx.AsyncClient(timeout=30) as client:
            slow = [asyncio.create_task(chat(client, url, key)) for _ in range(3)]

            async def three_in_flight() -> bool:
                status = (await client.get(f"{admin}/admin/status", headers=ADMIN)).json()
                return status["in_flight"] == 3

            await wait_for(three_in_flight, 10, "three calls in flight", every_s=0.02)
            status = (await client.get(f"{admin}/admin/status", headers=ADMIN)).json()
            assert status["in_flight"] == 3 and not status["paused"]

            paused = await client.post(f"{admin}/admin/pause", headers=ADMIN)
            assert paused.status_code == 200, paused.text
            body = paused.json()
            assert body["paused"] and body["drained"] == 3 and body["in_flight"] == 0
            assert body["drain_complete"]
            # the gateway finished all three before answering (drained, none in flight);
            # their answers may still be on the wire to this client
            done, _ = await asyncio.wait(slow, timeout=5)
            assert len(done) == 3, "in-flight calls did not end around the pause"
            assert [t.result().status_code for t in slow] == [200] * 3

            held = asyncio.create_task(chat(client, url, key))
            await asyncio.sleep(0.5)
            assert not held.done(), "a call went through while paused"
            status = (await client.get(f"{admin}/admin/status", headers=ADMIN)).json()
            assert status == status | {"paused": True, "held": 1, "in_flight": 0}

            resumed = await client.post(f"{admin}/admin/resume", headers=ADMIN)
            assert resumed.json()["released"] == 1 and not resumed.json()["paused"]
            answer = await asyncio.wait_for(held, 10)
            assert answer.status_code == 200
            assert answer.json()["choices"][0]["message"]["content"] == "after resume"
    records = storage.list_completions(session_id)
    assert len(records) == 4 and all(r.status_code == 200 for r in records)


async def test_each_call_records_its_replica_and_the_weight_version_the_last_resume_named(
    base_settings: Settings, storage: Storage
) -> None:
    replies = [text("before any sync"), text("held across the sync"), text("after")] * 2
    with gateway(base_settings, replies) as (url, admin, settings):
        session_id, key = session_key(settings)
        async with httpx.AsyncClient(timeout=30) as client:
            assert (await chat(client, url, key)).status_code == 200
            await client.post(f"{admin}/admin/pause", headers=ADMIN)
            held = asyncio.create_task(chat(client, url, key))
            await asyncio.sleep(0.3)
            refused = await client.post(
                f"{admin}/admin/resume", params={"policy_version": -1}, headers=ADMIN
            )
            assert refused.status_code == 400 and "policy_version" in refused.text
            resumed = await client.post(
                f"{admin}/admin/resume", params={"policy_version": 3}, headers=ADMIN
            )
            assert resumed.json()["policy_version"] == 3 and resumed.json()["released"] == 1
            assert (await asyncio.wait_for(held, 10)).status_code == 200
            # a resume that names no version keeps the one served
            await client.post(f"{admin}/admin/pause", headers=ADMIN)
            await client.post(f"{admin}/admin/resume", headers=ADMIN)
            assert (await chat(client, url, key)).status_code == 200
            status = (await client.get(f"{admin}/admin/status", headers=ADMIN)).json()
            assert status["policy_version"] == 3
            # a trainer's weight sync names its version: initial_version plus its syncs
            sync = InPlaceReload(Path("/nonexistent"), [], [admin], TOKEN, initial_version=6)
            sync.syncs = 1
            await asyncio.to_thread(sync.pause)
            await asyncio.to_thread(sync.resume)
            assert (await chat(client, url, key)).status_code == 200
    records = sorted(storage.list_completions(session_id), key=lambda r: r.seq)
    assert [r.policy_version for r in records] == [None, 3, 3, 7]
    upstream = settings.upstream_urls.split(",")[0].rstrip("/")
    assert [r.upstream_url for r in records] == [upstream] * 4


async def test_held_call_times_out_with_503_in_callers_shape(
    base_settings: Settings, storage: Storage
) -> None:
    with gateway(base_settings, [text("never")], pause_hold_s=0.3) as (url, admin, settings):
        session_id, key = session_key(settings)
        async with httpx.AsyncClient(timeout=30) as client:
            assert (await client.post(f"{admin}/admin/pause", headers=ADMIN)).json()["drained"] == 0
            answer = await client.post(
                f"{url}/v1/messages",
                json={"model": "p", "max_tokens": 16, "messages": MESSAGES},
                headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
            )
            assert answer.status_code == 503
            body = answer.json()
            assert body["type"] == "error" and "paused" in body["error"]["message"]
            await client.post(f"{admin}/admin/resume", headers=ADMIN)
    assert storage.list_completions(session_id) == []  # never reached upstream


async def test_admin_endpoints_need_the_admin_token(base_settings: Settings) -> None:
    with gateway(base_settings, []) as (url, admin, _):
        async with httpx.AsyncClient(timeout=10) as client:
            assert (await client.post(f"{admin}/admin/pause")).status_code == 401
            wrong = {"Authorization": "Bearer nope"}
            assert (await client.post(f"{admin}/admin/pause", headers=wrong)).status_code == 403
            assert (await client.get(f"{admin}/admin/status", headers=wrong)).status_code == 403
            ok = await client.get(f"{admin}/admin/status", headers={"X-Admin-Token": TOKEN})
            assert ok.status_code == 200 and ok.json()["paused"] is False
    with gateway(base_settings, [], admin_token=None) as (url, admin, _):
        async with httpx.AsyncClient(timeout=10) as client:
            disabled = await client.post(f"{admin}/admin/pause", headers=ADMIN)
            assert disabled.status_code == 403
            assert disabled.json()["error"]["code"] == "admin_disabled"


def _samples(exposition: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
    }


async def test_metrics_after_real_calls(base_settings: Settings, storage: Storage) -> None:
    replies = [text("one"), text("two"), error(400, "bad"), text("three")]
    with gateway(base_settings, replies, metrics_max_sessions=1) as (url, admin, settings):
        first, key = session_key(settings, "task-metrics")
        second, key2 = session_key(settings, "task-metrics")
        async with httpx.AsyncClient(timeout=30) as client:
            assert (await chat(client, url, key)).status_code == 200
            assert (await chat(client, url, key)).status_code == 200
            assert (await chat(client, url, key)).status_code == 400
            answer = await client.post(
                f"{url}/v1/messages",
                json={"model": "p", "max_tokens": 16, "messages": MESSAGES},
                headers={"x-api-key": key2, "anthropic-version": "2023-06-01"},
            )
            assert answer.status_code == 200
            scraped = await client.get(f"{admin}/metrics")
    assert scraped.status_code == 200
    m = _samples(scraped.text)
    chat_ok = ("polar_gateway_calls_total", (("provider", "openai_chat"), ("status", "200")))
    assert m[chat_ok] == 2
    assert m[("polar_gateway_calls_total", (("provider", "openai_chat"), ("status", "400")))] == 1
    msgs = ("polar_gateway_calls_total", (("provider", "anthropic_messages"), ("status", "200")))
    assert m[msgs] == 1
    assert m[("polar_gateway_call_seconds_count", (("provider", "openai_chat"),))] == 3
    upstream = (("code", "400"), ("provider", "openai_chat"))
    assert m[("polar_gateway_upstream_errors_total", upstream)] == 1
    prompt = m[("polar_gateway_prompt_tokens_total", (("provider", "openai_chat"),))]
    completion = m[("polar_gateway_completion_tokens_total", (("provider", "openai_chat"),))]
    records = [r for r in storage.list_completions(first) if r.status_code == 200]
    assert prompt == sum(len(r.prompt_token_ids or []) for r in records) > 0
    assert completion == sum(len(r.response_token_ids or []) for r in records) > 0
    # per-session series are bounded (metrics_max_sessions=1): only the latest session is kept
    sessions = {
        dict(labels)["session_id"] for (name, labels) in m if name.startswith("polar_gateway_sess")
    }
    assert sessions == {second}
    assert m[("polar_gateway_recording_failures_total", ())] == 0
    assert m[("polar_gateway_in_flight", ())] == 0


async def test_recording_failures_are_counted(base_settings: Settings, storage: Storage) -> None:
    broken = Storage(base_settings.model_copy(update={"s3_secret_key": "not-the-real-key"}))
    with gateway(base_settings, [text("lost")], storage=broken) as (url, admin, settings):
        _, key = session_key(settings)
        async with httpx.AsyncClient(timeout=30) as client:
            assert (await chat(client, url, key)).status_code == 503
            m = _samples((await client.get(f"{admin}/metrics")).text)
    assert m[("polar_gateway_recording_failures_total", ())] == 1
    assert m[("polar_gateway_calls_total", (("provider", "openai_chat"), ("status", "503")))] == 1


def test_json_logs_carry_session_and_task_ids(
    base_settings: Settings, storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    """Gateway log lines written while serving a call carry its session and task ids."""
    with gateway(base_settings, [text("hello")]) as (url, admin, settings):
        session_id, key = session_key(settings, "task-logs")
        with caplog.at_level(logging.INFO, logger="polar.gateway"):
            caplog.handler.addFilter(ContextFilter())
            answer = httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": "p", "messages": MESSAGES},
                headers={"Authorization": f"Bearer {key}"},
                timeout=30,
            )
    assert answer.status_code == 200
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records]
    calls = [line for line in lines if line["msg"].startswith("model call")]
    assert calls, lines
    assert calls[0] | {"session_id": session_id, "task_id": "task-logs"} == calls[0]
    assert calls[0]["provider"] == "openai_chat" and calls[0]["status"] == 200

"""Calls the gateway could not serve are counted per session (issue 22): a dead inference
backend behind the real gateway, and the gateway itself gone, seen through a session's
channel relay (what the run stage reads) and in the gateway's failed records."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from activities.runtimes.network.channel import GatewayRelay
from polar.outcomes import GATEWAY_FAULT_HEADER, classify, count_unserved
from polar.records import InfraReason, SessionStatus
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from proxy.app import create_app
from tests.support.ports import refusing_port
from tests.support.scripted_backend import scripted_backend, serve_app, text

MESSAGES = [{"role": "user", "content": "Say hello."}]


async def _call(relay: GatewayRelay) -> httpx.Response:
    transport = httpx.AsyncHTTPTransport(uds=str(relay.socket_path))
    async with httpx.AsyncClient(transport=transport, timeout=30) as client:
        return await client.post(
            "http://relay/v1/chat/completions", json={"model": "policy", "messages": MESSAGES}
        )


def _session(settings: Settings, attempt: int = 1) -> tuple[SessionIdentity, str]:
    identity = SessionIdentity(f"s-{uuid.uuid4().hex[:12]}", "task-unserved", attempt)
    return identity, mint_session_key(identity, settings.session_secret)


async def test_a_dead_backend_behind_the_gateway_counts_unserved_calls(
    base_settings: Settings, storage: Storage, tmp_path: Path
) -> None:
    with scripted_backend([text("served")]) as backend, refusing_port() as dead:
        # one live replica first, then only the dead one: every replica refuses
        live = base_settings.model_copy(update={"upstream_urls": backend.url})
        identity, key = _session(base_settings, attempt=2)
        with serve_app(create_app(live, storage)) as url:
            async with GatewayRelay(tmp_path / "live", url, key) as relay:
                assert (await _call(relay)).status_code == 200
            assert (relay.forwarded, relay.unserved) == (1, 0)
        down = base_settings.model_copy(update={"upstream_urls": f"http://127.0.0.1:{dead}/v1"})
        app = create_app(down, storage)
        with serve_app(app) as url, serve_app(app.state.admin_app) as admin:
            async with GatewayRelay(tmp_path / "dead", url, key) as relay:
                answers = [await _call(relay) for _ in range(3)]
            metrics = httpx.get(f"{admin}/metrics").text
    assert [a.status_code for a in answers] == [502, 502, 502]
    assert answers[0].json()["error"]["code"] == "upstream_unreachable"
    assert (relay.forwarded, relay.unserved) == (3, 3)
    assert relay.unserved_by_gateway == 0  # the backend's fault, not the gateway's
    # the gateway counts them per session too (its bounded per-session series)
    series = (
        f'polar_gateway_session_unserved_calls_total{{session_id="{identity.session_id}",'
        f'task_id="task-unserved"}} 3.0'
    )
    assert series in metrics, metrics[-2000:]
    # the gateway recorded each failed call before answering it: the count holds without
    # the relay too (an unsealed runtime), per attempt
    records = storage.list_completions(identity.session_id)
    assert count_unserved(records, attempt=2) == 3
    assert count_unserved(records, attempt=1) == 0


async def test_a_gateway_that_is_gone_counts_as_unserved(
    base_settings: Settings, tmp_path: Path
) -> None:
    _, key = _session(base_settings)
    with refusing_port() as gone:
        async with GatewayRelay(tmp_path / "gone", f"http://127.0.0.1:{gone}", key) as relay:
            answer = await _call(relay)
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "gateway_unreachable"
    assert relay.unserved == 1 and relay.unserved_by_gateway == 1


async def test_a_gateway_that_cannot_record_is_its_own_fault(
    base_settings: Settings, tmp_path: Path
) -> None:
    """S3 gone: the gateway answers 503 `recording_failed` (never an unrecorded answer), marked
    as its own fault, which the relay counts apart from the backend's."""
    with scripted_backend([text("served")]) as backend, refusing_port() as s3_gone:
        settings = base_settings.model_copy(
            update={"upstream_urls": backend.url, "s3_endpoint": f"http://127.0.0.1:{s3_gone}"}
        )
        _, key = _session(settings)
        with serve_app(create_app(settings, Storage(settings))) as url:
            async with GatewayRelay(tmp_path / "s3", url, key) as relay:
                answer = await _call(relay)
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "recording_failed"
    assert answer.headers[GATEWAY_FAULT_HEADER] == "recording_failed"
    assert (relay.unserved, relay.unserved_by_gateway) == (1, 1)
    outcome = classify(
        SessionStatus.HARNESS_FAILED,
        harness_started=True,
        unserved_calls=relay.unserved,
        unserved_by_gateway=relay.unserved_by_gateway,
    )
    assert outcome is not None and outcome.reason == InfraReason.GATEWAY

"""Session-affine routing through the real gateway: scripted vLLM-shaped replicas, real S3.

Each session's calls reach one replica; when that replica stops, its sessions move
to one other replica each (and stay there) while the other sessions stay put.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from polar.settings import Settings
from polar.storage import Storage
from proxy.upstream import UpstreamClient
from tests.integration.test_gateway import MESSAGES, Gateway, running_gateway
from tests.support import ScriptedBackend, scripted_backend, text
from tests.support.polling import wait_until

REPLICAS = 3
SESSIONS = 8
TURNS = 4


def where(session_id: str, turn: int, backends: list[ScriptedBackend]) -> int:
    """The backend that served `turn` of the session (the session rides in `cache_salt`
    under POLAR_UPSTREAM_CACHE_SALT=session, the turn in the last message)."""
    got = [
        i
        for i, b in enumerate(backends)
        for body in b.requests
        if body.get("cache_salt") == session_id
        and body["messages"][-1]["content"] == f"turn {turn}"
    ]
    assert len(got) == 1, (session_id, turn, got)
    return got[0]


def call(gateway: Gateway, key: str, turn: int) -> str:
    messages = MESSAGES + [{"role": "user", "content": f"turn {turn}"}]
    answer = gateway.client(key).chat.completions.create(model="policy", messages=messages)
    return answer.choices[0].message.content or ""


def test_a_session_stays_on_one_replica_and_fails_over_when_it_stops(
    base_settings: Settings, storage: Storage
) -> None:
    replicas = [contextlib.ExitStack() for _ in range(REPLICAS)]
    with contextlib.ExitStack() as stack:
        for r in replicas:
            stack.enter_context(r)
        backends = [
            r.enter_context(scripted_backend([text(f"r{i}")] * 100)) for i, r in enumerate(replicas)
        ]
        gateway = stack.enter_context(
            running_gateway(
                base_settings,
                [b.url for b in backends],
                upstream_cache_salt="session",
                upstream_health_interval_s=0,  # passive health only: a call finds it down
            )
        )
        sessions = [gateway.session() for _ in range(SESSIONS)]
        for turn in range(TURNS):
            for _, key in sessions:
                call(gateway, key, turn)
        homes: dict[str, int] = {}
        for identity, _ in sessions:
            used = {where(identity.session_id, t, backends) for t in range(TURNS)}
            assert len(used) == 1, used  # every turn on one replica
            homes[identity.session_id] = used.pop()
        assert len(set(homes.values())) >= 2, homes  # the sessions spread over replicas

        victim = homes[sessions[0][0].session_id]
        health = backends[victim].url.removesuffix("/v1") + "/health"
        assert httpx.get(health).status_code == 200
        replicas[victim].close()  # the replica stops: its port refuses connections
        with pytest.raises(httpx.TransportError):
            httpx.get(health)
        for turn in range(TURNS, 2 * TURNS):
            for _, key in sessions:
                assert call(gateway, key, turn)
        records = storage.list_completions(sessions[0][0].session_id)

    for identity, _ in sessions:
        sid = identity.session_id
        later = {where(sid, t, backends) for t in range(TURNS, 2 * TURNS)}
        assert len(later) == 1, later  # one replica after the stop too
        if homes[sid] == victim:
            assert later != {victim}
        else:
            assert later == {homes[sid]}  # only the stopped replica's sessions moved
    assert len(records) == 2 * TURNS and all(r.status_code == 200 for r in records)


@pytest.mark.parametrize("salt", ["off", "task"])
def test_cache_salt_is_opt_in(base_settings: Settings, storage: Storage, salt: str) -> None:
    with (
        scripted_backend([text("a")]) as backend,
        running_gateway(base_settings, [backend.url], upstream_cache_salt=salt) as gateway,
    ):
        identity, key = gateway.session()
        call(gateway, key, 0)
    sent = backend.requests[0]
    if salt == "off":
        assert "cache_salt" not in sent
    else:
        assert sent["cache_salt"] == identity.task_id


async def test_the_url_file_is_reread_and_replicas_probed(
    base_settings: Settings, tmp_path: Path
) -> None:
    """`refresh` (what the background probe runs): the file's list replaces the set, a
    replica whose /health stops answering is marked down; an empty file changes nothing."""
    urls_file = tmp_path / "upstreams"
    stopper = contextlib.ExitStack()
    with scripted_backend() as one, stopper, scripted_backend() as two:
        three = stopper.enter_context(scripted_backend())
        urls_file.write_text(f"{one.url}\n")
        settings = base_settings.model_copy(
            update={"upstream_urls": two.url, "upstream_urls_file": urls_file}
        )
        client = UpstreamClient(settings)
        try:
            assert client.urls == [one.url]  # the file wins over POLAR_UPSTREAM_URLS
            urls_file.write_text(f"# replicas\n{one.url}\n{two.url}, {three.url}\n")
            await client.refresh()
            assert client.urls == [one.url, two.url, three.url]
            assert all(r["up"] for r in client.router.snapshot())
            stopper.close()  # the third replica stops
            await client.refresh()
            up = {r["url"]: r["up"] for r in client.router.snapshot()}
            assert up == {one.url: True, two.url: True, three.url: False}
            urls_file.write_text("")  # an empty file: the last good list stays
            await client.refresh()
            assert client.urls == [one.url, two.url, three.url]
            urls_file.write_text(f"{two.url}\n")
            await client.refresh()
            assert client.urls == [two.url]
        finally:
            await client.aclose()


@contextlib.contextmanager
def dropping_port() -> Iterator[int]:
    """A loopback port whose server reads each request and closes the connection without an
    answer, as a replica that dies mid-call does."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_replica_that_drops_calls_is_passed_over(
    base_settings: Settings, storage: Storage
) -> None:
    with (
        dropping_port() as port,
        scripted_backend([text(f"ok {i}") for i in range(6)]) as backend,
        running_gateway(
            base_settings,
            [f"http://127.0.0.1:{port}/v1", backend.url],
            upstream_routing="round_robin",  # every other call is placed on the dropper
            upstream_health_interval_s=0,
        ) as gateway,
    ):
        identity, key = gateway.session()
        answers = [call(gateway, key, t) for t in range(6)]
        records = storage.list_completions(identity.session_id)
    assert answers == [f"ok {i}" for i in range(6)]
    assert len(backend.requests) == 6
    assert [r.status_code for r in records] == [200] * 6


def test_a_replica_at_its_limit_spills_the_sessions_next_call(
    base_settings: Settings, storage: Storage
) -> None:
    """POLAR_UPSTREAM_MAX_INFLIGHT=1: a second call of the session while the first is still
    sampling goes to the other replica; once the first has its answer, home again."""
    slow = [text("slow", delay_s=1.5)] + [text("home")] * 4
    with (
        scripted_backend(list(slow)) as one,
        scripted_backend(list(slow)) as two,
        running_gateway(
            base_settings,
            [one.url, two.url],
            upstream_max_inflight=1,
            upstream_cache_salt="session",
            upstream_health_interval_s=0,
        ) as gateway,
    ):
        identity, key = gateway.session()
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(call, gateway, key, 0)
            wait_until(lambda: len(one.requests) + len(two.requests) == 1, 10, "first call")
            second = pool.submit(call, gateway, key, 1)
            answers = [first.result(), second.result()]
        third = call(gateway, key, 2)
        records = storage.list_completions(identity.session_id)
    backends = [one, two]
    home = where(identity.session_id, 0, backends)
    assert where(identity.session_id, 1, backends) == 1 - home  # spilled while home was busy
    assert where(identity.session_id, 2, backends) == home  # and back once it was free
    assert answers[0] == "slow" and third == "home"
    assert len(records) == 3 and all(r.status_code == 200 for r in records)

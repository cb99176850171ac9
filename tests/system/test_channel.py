"""A session's gateway channel: the host relay on a Unix socket and the in-sandbox forwarder.

Real parts: the gateway app (served on loopback) over a scripted vLLM-shaped
backend, recording to the suite's SeaweedFS; the relay in the test's event
loop; the forwarder script as a subprocess of the system `/usr/bin/python3`
(as in a session image); and once, a real container with `--network none`.
Clients are async because the relay serves in the test's own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import httpx
import openai
import pytest

from activities.runtimes import toolbox
from activities.runtimes.network.channel import (
    FORWARDER_NAME,
    FORWARDER_SCRIPT,
    PLACEHOLDER_KEY,
    SANDBOX_DIR,
    SANDBOX_GATEWAY_URL,
    SOCKET_NAME,
    GatewayRelay,
    with_forwarder,
)
from activities.runtimes.network.guard import ChannelLimits
from activities.shell_command import run_shell
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from proxy.app import create_app
from tests.support import ScriptedBackend, scripted_backend, serve_app, text
from tests.support.paths import REPO
from tests.support.polling import wait_for, wait_until
from tests.support.ports import free_port, refusing_port

SYSTEM_PYTHON = "/usr/bin/python3"
MESSAGES = [{"role": "user", "content": "Say hello."}]


@dataclass
class ChannelGateway:
    """The gateway on loopback, the calls it got (path, headers), and the backend behind it."""

    url: str
    settings: Settings
    backend: ScriptedBackend
    calls: list[tuple[str, list[tuple[str, str]]]]

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.calls]

    def session_keys_seen(self, since: int) -> list[list[str]]:
        """The `x-polar-session-key` values of each call from `since` on."""
        return [[v for k, v in h if k == "x-polar-session-key"] for _, h in self.calls[since:]]

    def session(self) -> tuple[SessionIdentity, str]:
        identity = SessionIdentity(f"s-{uuid.uuid4().hex[:12]}", "task-channel")
        return identity, mint_session_key(identity, self.settings.session_secret)


@dataclass
class Channel:
    """One session's relay and a forwarder serving it on a loopback port."""

    relay: GatewayRelay
    identity: SessionIdentity
    url: str  # the forwarder, as a sealed harness sees the gateway


@pytest.fixture(scope="module")
def channel_gateway(base_settings: Settings, storage: Storage) -> Iterator[ChannelGateway]:
    with scripted_backend() as backend:
        settings = base_settings.model_copy(update={"upstream_urls": backend.url})
        app = create_app(settings, storage)
        calls: list[tuple[str, list[tuple[str, str]]]] = []

        async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = [(k.decode().lower(), v.decode()) for k, v in scope["headers"]]
                calls.append((scope["path"], headers))
            await app(scope, receive, send)

        with serve_app(recording) as url:
            yield ChannelGateway(url, settings, backend, calls)


def wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    def listening() -> bool:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listening, 10, f"the forwarder listening on {port}", every_s=0.02)


FORWARDERS = ["python", "helper"]
"""The local sandboxes' forwarder (forwarder.py with python3) and a container's (the
toolbox's static helper, infra/toolbox/polar-helper.c): both pass the same tests."""


def forwarder_argv(kind: str, script_dir: Path) -> list[str]:
    """The argv of a forwarder of `kind` (options to follow)."""
    if kind == "helper":
        return [str(toolbox.host_program("polar-helper")), "forward"]
    return [SYSTEM_PYTHON, str(script_dir / FORWARDER_NAME)]


def start_forwarder(channel_dir: Path, kind: str = "python") -> tuple[subprocess.Popen[bytes], int]:
    """A forwarder of `kind` for the channel in `channel_dir`, on a free port."""
    port = free_port()
    argv = [
        *forwarder_argv(kind, channel_dir),
        "--socket",
        str(channel_dir / SOCKET_NAME),
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    wait_for_port(port, proc)
    return proc, port


@pytest.fixture(params=FORWARDERS)
async def channel(
    channel_gateway: ChannelGateway, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Channel]:
    identity, key = channel_gateway.session()
    async with GatewayRelay(tmp_path / "channel", channel_gateway.url, key) as relay:
        proc, port = start_forwarder(relay.channel_dir, request.param)
        try:
            yield Channel(relay, identity, f"http://127.0.0.1:{port}")
        finally:
            proc.terminate()
            proc.wait(timeout=10)


async def chat(url: str, headers: dict[str, str] | None = None, **body: Any) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(
            f"{url}/v1/chat/completions",
            json={"model": "policy", "messages": MESSAGES} | body,
            headers={"authorization": f"Bearer {PLACEHOLDER_KEY}"} | (headers or {}),
        )


async def test_a_call_is_recorded_under_the_relays_session(
    channel: Channel, channel_gateway: ChannelGateway, storage: Storage
) -> None:
    channel_gateway.backend.push(text("Hello through the channel."))
    answer = await chat(channel.url)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "Hello through the channel."
    records = storage.list_completions(channel.identity.session_id)
    assert [(r.session_id, r.task_id) for r in records] == [
        (channel.identity.session_id, "task-channel")
    ]
    # the gateway never saw the placeholder win: the key it verified was the relay's
    assert channel_gateway.backend.requests[-1]["messages"][-1]["content"] == "Say hello."


async def test_another_sessions_valid_key_on_this_channel_is_still_this_session(
    channel: Channel, channel_gateway: ChannelGateway, storage: Storage
) -> None:
    other, other_key = channel_gateway.session()
    channel_gateway.backend.push(text("one"), text("two"))
    before = len(channel_gateway.calls)
    as_bearer = await chat(channel.url, {"authorization": f"Bearer {other_key}"})
    as_polar_key = await chat(
        channel.url, {"x-polar-session-key": other_key, "x-api-key": other_key}
    )
    assert as_bearer.status_code == 200 and as_polar_key.status_code == 200
    assert len(storage.list_completions(channel.identity.session_id)) == 2
    assert storage.list_completions(other.session_id) == []
    # the relay replaced the inbound session key rather than adding a second one
    assert channel_gateway.session_keys_seen(before) == [[channel.relay.session_key]] * 2


@pytest.mark.parametrize("path", ["/admin/status", "/metrics", "/docs", "/health", "/openapi.json"])
async def test_non_model_paths_are_404_and_never_reach_the_gateway(
    channel: Channel, channel_gateway: ChannelGateway, path: str
) -> None:
    before = len(channel_gateway.paths)
    async with httpx.AsyncClient(timeout=30) as client:
        answer = await client.get(f"{channel.url}{path}")
        posted = await client.post(f"{channel.url}{path}", json={})
    assert answer.status_code == 404 and posted.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"
    assert channel_gateway.paths[before:] == []


async def test_api_root_probes_pass_but_nothing_else_at_the_root(
    channel: Channel, channel_gateway: ChannelGateway
) -> None:
    """Clients probe `/` and `/v1` (GET or HEAD); a POST there is not a model call."""
    async with httpx.AsyncClient(timeout=30) as client:
        probes = [
            await client.request(m, f"{channel.url}{p}")
            for m in ("GET", "HEAD")
            for p in ("/", "/v1")
        ]
        posted = await client.post(f"{channel.url}/", json={})
    assert [r.status_code for r in probes] == [200] * 4
    assert posted.status_code == 404


async def test_a_channel_dir_past_the_unix_socket_path_limit(
    channel_gateway: ChannelGateway, storage: Storage, tmp_path: Path
) -> None:
    """Session ids can be long (task ids up to 128 characters): the relay binds and the
    forwarder connects however long the channel dir's path is."""
    deep = tmp_path / ("t" * 120) / ("s" * 60) / "channel"
    assert len(str(deep / SOCKET_NAME)) > 108
    identity, key = channel_gateway.session()
    channel_gateway.backend.push(text("Long paths work."))
    async with GatewayRelay(deep, channel_gateway.url, key) as relay:
        assert relay.socket_path.is_socket()
        proc, port = start_forwarder(relay.channel_dir)
        try:
            answer = await chat(f"http://127.0.0.1:{port}")
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert answer.status_code == 200, answer.text
    assert len(storage.list_completions(identity.session_id)) == 1


async def test_dot_segments_cannot_climb_out_of_v1(
    channel: Channel, channel_gateway: ChannelGateway
) -> None:
    before = len(channel_gateway.paths)
    port = int(channel.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /v1/../admin/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await writer.drain()
    raw = await reader.read()
    writer.close()
    assert raw.startswith(b"HTTP/1.1 404"), raw[:200]
    assert channel_gateway.paths[before:] == []


async def test_streamed_chat_completion_with_the_openai_sdk(
    channel: Channel, channel_gateway: ChannelGateway, storage: Storage
) -> None:
    content = "The quick brown fox jumps over the lazy dog, streamed."
    channel_gateway.backend.push(text(content))
    client = openai.AsyncOpenAI(
        base_url=f"{channel.url}/v1", api_key=PLACEHOLDER_KEY, max_retries=0, timeout=30
    )
    stream = await client.chat.completions.create(
        model="policy", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    await client.close()
    pieces = [c.choices[0].delta.content for c in chunks if c.choices]
    assert len([p for p in pieces if p]) > 1
    assert "".join(p for p in pieces if p) == content
    assert chunks[-1].usage is not None
    (record,) = storage.list_completions(channel.identity.session_id)
    assert record.response["choices"][0]["message"]["content"] == content


async def test_a_large_body_passes_intact(
    channel: Channel, channel_gateway: ChannelGateway
) -> None:
    big = "".join(f"line {i}: {uuid.uuid4().hex}\n" for i in range(120_000))  # ~6 MB
    channel_gateway.backend.push(text("read it"))
    answer = await chat(channel.url, messages=[{"role": "user", "content": big}])
    assert answer.status_code == 200, answer.text[:500]
    assert channel_gateway.backend.requests[-1]["messages"][-1]["content"] == big


async def test_keep_alive_serves_several_calls_on_one_connection(channel: Channel) -> None:
    port = int(channel.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(3):
        writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        assert json.loads(await reader.readexactly(length))["data"]
    writer.close()


@pytest.mark.parametrize("kind", FORWARDERS)
async def test_forwarder_passes_half_closes_both_ways(kind: str, tmp_path: Path) -> None:
    """A peer that answers only after the caller's EOF, then closes: the answer arrives whole."""
    sock = tmp_path / "echo.sock"

    async def upper_after_eof(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()  # until the caller's half-close
        writer.write(data.upper())
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(upper_after_eof, path=str(sock))
    (tmp_path / FORWARDER_NAME).write_bytes(
        (REPO / "activities/runtimes/network/forwarder.py").read_bytes()
    )
    port = free_port()
    argv = [*forwarder_argv(kind, tmp_path), "--socket", str(sock), "--port", str(port)]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    try:
        await asyncio.to_thread(wait_for_port, port, proc)
        payload = b"x" * (3 * 1024 * 1024) + b"end"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(payload)
        writer.write_eof()
        assert await reader.read() == payload.upper()
        writer.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        server.close()


async def test_relay_exit_removes_the_socket_and_keeps_the_dir(
    channel_gateway: ChannelGateway, tmp_path: Path
) -> None:
    _, key = channel_gateway.session()
    channel_dir = tmp_path / "channel"
    async with GatewayRelay(channel_dir, channel_gateway.url, key) as relay:
        assert relay.socket_path == channel_dir / SOCKET_NAME
        assert relay.socket_path.is_socket()
        assert relay.socket_path.stat().st_mode & 0o777 == 0o666
        assert (channel_dir / FORWARDER_NAME).is_file()
        transport = httpx.AsyncHTTPTransport(uds=str(relay.socket_path))
        async with httpx.AsyncClient(transport=transport) as client:
            assert (await client.get("http://relay/v1/models")).status_code == 200
    assert not relay.socket_path.exists()
    assert channel_dir.is_dir() and (channel_dir / FORWARDER_NAME).is_file()
    # and a fresh relay starts cleanly on the same dir
    async with GatewayRelay(channel_dir, channel_gateway.url, key) as again:
        assert again.socket_path.is_socket()
    assert not again.socket_path.exists()


async def test_relays_side_by_side_keep_their_sessions_and_the_signal_handlers(
    channel_gateway: ChannelGateway, storage: Storage, tmp_path: Path
) -> None:
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    sessions = [channel_gateway.session() for _ in range(3)]
    channel_gateway.backend.push(*(text(f"answer {i}") for i in range(len(sessions))))
    async with contextlib.AsyncExitStack() as stack:
        relays = [
            await stack.enter_async_context(
                GatewayRelay(tmp_path / f"channel-{i}", channel_gateway.url, key)
            )
            for i, (_, key) in enumerate(sessions)
        ]
        assert {sig: signal.getsignal(sig) for sig in handlers} == handlers

        async def call(relay: GatewayRelay) -> int:
            transport = httpx.AsyncHTTPTransport(uds=str(relay.socket_path))
            async with httpx.AsyncClient(transport=transport, timeout=30) as client:
                answer = await client.post(
                    "http://relay/v1/chat/completions",
                    json={"model": "policy", "messages": MESSAGES},
                    headers={"authorization": f"Bearer {sessions[0][1]}"},
                )
                return answer.status_code

        assert await asyncio.gather(*(call(r) for r in relays)) == [200] * len(relays)
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    for identity, _ in sessions:
        assert len(storage.list_completions(identity.session_id)) == 1
    assert not any(r.socket_path.exists() for r in relays)


async def test_gateway_unreachable_is_a_502(tmp_path: Path) -> None:
    with refusing_port() as port:
        dead = f"http://127.0.0.1:{port}"
        async with GatewayRelay(tmp_path / "channel", dead, "pk-unused") as relay:
            transport = httpx.AsyncHTTPTransport(uds=str(relay.socket_path))
            async with httpx.AsyncClient(transport=transport) as client:
                answer = await client.post("http://relay/v1/chat/completions", json={})
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "gateway_unreachable"


async def test_with_forwarder_fails_loudly_without_a_relay(tmp_path: Path) -> None:
    """A channel dir without the forwarder script: the command never runs, bash says why."""
    port = free_port()
    command = with_forwarder("echo ran", str(tmp_path), port=port)
    proc = await asyncio.to_thread(
        subprocess.run, ["bash", "-c", command], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert "ran" not in proc.stdout
    assert "forwarder did not start" in proc.stderr


async def test_with_forwarder_listens_before_the_command_runs(
    channel_gateway: ChannelGateway, tmp_path: Path
) -> None:
    """The command's very first instruction reaches the gateway (it runs only once the port
    listens: no readiness wait of its own), it runs with SIGPIPE as usual (python ignores it;
    the exec in its place restores it), and its exit code is the result."""
    _, key = channel_gateway.session()
    channel_gateway.backend.push(text("first try"))
    port = free_port()
    probe = (
        "import json, urllib.request\n"
        f"call = urllib.request.Request('http://127.0.0.1:{port}/v1/chat/completions',\n"
        f"    data=json.dumps({{'model': 'm', 'messages': {MESSAGES!r}}}).encode(),\n"
        "    headers={'content-type': 'application/json'})\n"
        "print(json.load(urllib.request.urlopen(call, timeout=30))['choices'][0]['message']"
        "['content'])\n"
    )
    script = (
        f"python3 -c {shlex.quote(probe)}; yes | head -c1 >/dev/null; "
        "echo pipe=${PIPESTATUS[0]}; exit 7"
    )
    async with GatewayRelay(tmp_path / "channel", channel_gateway.url, key) as relay:
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            with_forwarder(script, str(relay.channel_dir), port=port),
            env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # the forwarder it leaves (no sandbox here) is killed below
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 7, err.decode()
    assert out.decode().split() == ["first", "try", "pipe=141"]


async def test_with_forwarder_never_runs_the_command_when_the_port_is_taken(
    tmp_path: Path,
) -> None:
    shutil.copyfile(FORWARDER_SCRIPT, tmp_path / FORWARDER_NAME)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        command = with_forwarder("echo ran", str(tmp_path), port=port)
        proc = await asyncio.to_thread(
            subprocess.run,
            ["bash", "-c", command],
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 97
    assert "ran" not in proc.stdout
    assert f"forwarder did not start on 127.0.0.1:{port}" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", FORWARDERS)
async def test_forwarder_in_a_container_without_network(
    kind: str,
    docker_image: str,
    channel_gateway: ChannelGateway,
    base_settings: Settings,
    storage: Storage,
    tmp_path: Path,
) -> None:
    identity, key = channel_gateway.session()
    s3_port = int(base_settings.s3_endpoint.rsplit(":", 1)[1])
    gateway_port = int(channel_gateway.url.rsplit(":", 1)[1])
    probe = (
        "import json, socket, urllib.request\n"
        f"with urllib.request.urlopen({SANDBOX_GATEWAY_URL + '/v1/models'!r}, timeout=10) as r:\n"
        "    print('MODELS', r.status, json.load(r)['data'][0]['id'])\n"
        f"call = urllib.request.Request({SANDBOX_GATEWAY_URL + '/v1/chat/completions'!r},\n"
        f"    data=json.dumps({{'model': 'm', 'messages': {MESSAGES!r}}}).encode(),\n"
        f"    headers={{'content-type': 'application/json',\n"
        f"             'authorization': 'Bearer {PLACEHOLDER_KEY}'}})\n"
        "with urllib.request.urlopen(call, timeout=30) as r:\n"
        "    print('CHAT', r.status, json.load(r)['choices'][0]['message']['content'])\n"
        f"for port in ({s3_port}, {gateway_port}):\n"
        "    s = socket.socket()\n"
        "    s.settimeout(3)\n"
        "    print('PORT', port, 'open' if s.connect_ex(('127.0.0.1', port)) == 0 else 'closed')\n"
        "import os\n"  # the forwarder is this process's child (it exec'd in the command's place)
        "me = os.getpid()\n"
        "for kid in open(f'/proc/{me}/task/{me}/children').read().split():\n"
        "    argv = open(f'/proc/{kid}/cmdline').read().split(chr(0))\n"
        "    print('FORWARDER', ' '.join(argv))\n"
    )
    command = with_forwarder(f"python3 -c {shlex.quote(probe)}", SANDBOX_DIR)
    channel_gateway.backend.push(text("from the box"))
    client = docker.from_env()
    async with GatewayRelay(tmp_path / "channel", channel_gateway.url, key) as relay:
        container = client.containers.run(
            docker_image,
            ["sleep", "infinity"],
            detach=True,
            network_mode="none",
            volumes={str(relay.channel_dir): {"bind": SANDBOX_DIR, "mode": "ro"}}
            | (toolbox.docker_volumes(tmp_path / "runtimes") if kind == "helper" else {}),
            labels={"polar.test": "channel"},
        )
        try:
            code, output = await asyncio.to_thread(container.exec_run, ["bash", "-c", command])
            writable = await asyncio.to_thread(
                container.exec_run, ["bash", "-c", f"touch {SANDBOX_DIR}/planted"]
            )
        finally:
            await asyncio.to_thread(container.remove, force=True)
    text_out = output.decode()
    assert code == 0, text_out
    assert "MODELS 200" in text_out
    assert f"PORT {s3_port} closed" in text_out
    assert f"PORT {gateway_port} closed" in text_out
    assert writable.exit_code != 0  # the channel dir is read-only inside
    assert not (relay.channel_dir / "planted").exists()
    assert "CHAT 200 from the box" in text_out
    # with the toolbox mounted its helper serves the port, else the image's python3
    serving = {
        "helper": "/run/polar-tools/polar-helper forward",
        "python": "python3 -I -S /run/polar/forwarder.py",
    }
    assert f"FORWARDER {serving[kind]}" in text_out, text_out
    (record,) = storage.list_completions(identity.session_id)
    assert record.session_id == identity.session_id


# ---------------------------------------------------------------------------- caps (issue 21)

HALF_HEADER = b"POST /v1/chat/completions HTTP/1.1\r\nHost: relay\r\nX-Slow: "


async def _half_open(path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(HALF_HEADER)
    await writer.drain()
    return reader, writer


async def _closed(reader: asyncio.StreamReader) -> None:
    """Until the peer ends the connection (EOF or a reset)."""
    with contextlib.suppress(ConnectionError):
        await reader.read()


async def test_unfinished_headers_time_out_with_a_408(
    channel_gateway: ChannelGateway, tmp_path: Path
) -> None:
    _, key = channel_gateway.session()
    limits = ChannelLimits(max_connections=8, header_timeout_s=0.5)
    async with GatewayRelay(tmp_path / "c", channel_gateway.url, key, limits=limits) as relay:
        held = [await _half_open(relay.socket_path) for _ in range(8)]
        answers = await asyncio.wait_for(asyncio.gather(*(r.read() for r, _ in held)), 10)
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers
        assert relay.guard.header_timeouts == 8 and relay.breach is None
        await wait_for(lambda: relay.guard.open == 0, 5, "the timed-out connections closed")
        # headers that keep growing, however fast, are cut too
        reader, writer = await asyncio.open_unix_connection(str(relay.socket_path))
        writer.write(HALF_HEADER + b"x" * (limits.max_header_bytes + 10))
        assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.1 431 ")
        # a complete call after the previous answer on a keep-alive connection is still served
        transport = httpx.AsyncHTTPTransport(uds=str(relay.socket_path))
        async with httpx.AsyncClient(transport=transport) as client:
            for _ in range(2):
                assert (await client.get("http://relay/v1/models")).status_code == 200
                await asyncio.sleep(0.3)
        for _, w in held:
            w.close()


async def test_a_session_past_its_connection_cap_is_ended_never_its_neighbour(
    channel_gateway: ChannelGateway, storage: Storage, tmp_path: Path
) -> None:
    _, key = channel_gateway.session()
    neighbour, neighbour_key = channel_gateway.session()
    limits = ChannelLimits(max_connections=16, header_timeout_s=30)
    async with (
        GatewayRelay(tmp_path / "a", channel_gateway.url, key, limits=limits) as relay,
        GatewayRelay(tmp_path / "n", channel_gateway.url, neighbour_key, limits=limits) as other,
    ):
        stdout, stderr = tmp_path / "out.log", tmp_path / "err.log"
        harness = run_shell(
            "sleep 60", cwd=tmp_path, env={}, stdout=stdout, stderr=stderr, timeout_s=120
        )
        guarded = asyncio.create_task(relay.run_guarded(harness, stderr))
        before = len(os.listdir("/proc/self/fd"))
        held = [await _half_open(relay.socket_path) for _ in range(16)]
        assert relay.breach is None
        with contextlib.suppress(OSError):  # the 17th: accepted, then the channel shuts
            held.append(await _half_open(relay.socket_path))
        outcome = await asyncio.wait_for(guarded, 30)
        assert outcome.exit_code is None and not outcome.timed_out
        assert outcome.limit_exceeded and "more than 16 connections" in outcome.limit_exceeded
        assert "polar: the gateway channel was shut" in stderr.read_text()
        # the open ones are cut, no new one is accepted: the worker's fds stay bounded
        await asyncio.wait_for(asyncio.gather(*(_closed(r) for r, _ in held)), 10)
        for _ in range(200):
            with contextlib.suppress(OSError):
                await _half_open(relay.socket_path)
        assert len(os.listdir("/proc/self/fd")) - before < 64
        # the neighbour's channel serves on
        channel_gateway.backend.push(text("still here"))
        transport = httpx.AsyncHTTPTransport(uds=str(other.socket_path))
        async with httpx.AsyncClient(transport=transport, timeout=30) as client:
            answer = await client.post(
                "http://relay/v1/chat/completions",
                json={"model": "policy", "messages": MESSAGES},
            )
        assert answer.status_code == 200, answer.text
        assert other.breach is None
    assert len(storage.list_completions(neighbour.session_id)) == 1


@pytest.mark.parametrize("via", ["socket", "forwarder"])
async def test_a_caller_that_leaves_is_a_499_at_the_gateway(
    via: str, channel_gateway: ChannelGateway, storage: Storage, tmp_path: Path
) -> None:
    """The caller gives up at 1.1 s, the upstream takes 3 s: recorded 499 and client
    disconnected, as when it calls the gateway directly."""
    identity, key = channel_gateway.session()
    channel_gateway.backend.push(text("too late", delay_s=3), text("in time"))
    async with GatewayRelay(tmp_path / "c", channel_gateway.url, key) as relay:
        proc = None
        if via == "forwarder":
            proc, port = start_forwarder(relay.channel_dir)
            client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=1.1)
        else:
            transport = httpx.AsyncHTTPTransport(uds=str(relay.socket_path))
            client = httpx.AsyncClient(transport=transport, base_url="http://r", timeout=1.1)
        body = {"model": "policy", "messages": MESSAGES}
        try:
            async with client:
                with pytest.raises(httpx.ReadTimeout):
                    await client.post("/v1/chat/completions", json=body)
                await asyncio.sleep(3)
                client.timeout = httpx.Timeout(30)
                assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)
    records = storage.list_completions(identity.session_id)
    assert [(r.status_code, r.client_disconnected) for r in records] == [(499, True), (200, False)]

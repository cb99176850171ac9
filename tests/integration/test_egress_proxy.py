"""A session's egress proxy (activities/runtimes/egress.py) enforces the task's network.

A real proxy on a real Unix socket, a real loopback HTTP server standing in for
"the internet", real requests written as a client behind HTTP_PROXY writes them
(absolute-form plain HTTP, CONNECT tunnels). The loopback server is reachable
only because the test's deployment exempts its one port
(`POLAR_EGRESS_EXEMPT=["127.0.0.1:PORT"]`): the default blocks loopback, which
also refuses a name that resolves (rebinds) to it. Every attempt is in the log.
Through the in-sandbox forwarder too: `with_forwarder` nests, so one command gets
the gateway's port and the egress port at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from activities.runtimes.base import Runtime
from activities.runtimes.channel import with_forwarder
from activities.runtimes.egress import (
    EGRESS_SOCKET,
    EgressPolicy,
    EgressProxy,
    EgressRefused,
    egress_refusal,
    open_egress,
)
from polar.contracts import RuntimeHandle
from polar.settings import Settings
from polar.tasks.spec import NetworkSpec

BODY = b"hello from the internet\n"


@pytest.fixture
async def internet() -> AsyncIterator[int]:
    """A loopback HTTP server: answers every request with BODY and the path it got."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1]
            body = BODY + b"path=" + path + b"\n"
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body)
                + body
            )
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def free_port() -> int:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()
    return port


def deployment(port: int | None) -> Settings:
    exempt = [f"127.0.0.1:{port}"] if port is not None else []
    return Settings(egress="proxy", egress_exempt=exempt)


async def ask(proxy: EgressProxy, request: bytes) -> bytes:
    """Send `request` to the proxy's socket; everything it answers until it closes."""
    reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


def proxy_for(tmp_path: Path, network: NetworkSpec, settings: Settings) -> EgressProxy:
    return EgressProxy(tmp_path / "channel", EgressPolicy.of(network, settings))


async def test_allowlist_hit_and_miss(tmp_path: Path, internet: int) -> None:
    network = NetworkSpec(mode="allowlist", allowed_hosts=["localhost"])
    async with proxy_for(tmp_path, network, deployment(internet)) as proxy:
        ok = await ask(
            proxy,
            f"GET http://localhost:{internet}/a?b=1 HTTP/1.1\r\n"
            f"Host: localhost:{internet}\r\nProxy-Connection: keep-alive\r\n\r\n".encode(),
        )
        miss = await ask(proxy, b"GET http://example.invalid/ HTTP/1.1\r\nHost: x\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200 OK") and BODY + b"path=/a?b=1" in ok
    assert miss.startswith(b"HTTP/1.1 403") and b"x-polar-egress: refused" in miss
    assert b"example.invalid:80 is not in the task's allowed_hosts" in miss
    hit, refused = proxy.log.entries
    assert (hit.host, hit.port, hit.ip, hit.allowed) == ("localhost", internet, "127.0.0.1", True)
    assert hit.bytes_down == len(ok) and hit.bytes_up > 0 and hit.method == "GET"
    # refused before any lookup: a name outside the list is never resolved
    assert (refused.host, refused.ip, refused.allowed) == ("example.invalid", None, False)


async def test_connect_tunnels_and_a_ports_entry_holds_its_port_only(
    tmp_path: Path, internet: int
) -> None:
    other = await free_port()
    network = NetworkSpec(mode="allowlist", allowed_hosts=[f"localhost:{internet}"])
    settings = Settings(
        egress="proxy", egress_exempt=[f"127.0.0.1:{internet}", f"127.0.0.1:{other}"]
    )
    async with proxy_for(tmp_path, network, settings) as proxy:
        tunnel = await ask(
            proxy,
            f"CONNECT localhost:{internet} HTTP/1.1\r\nHost: localhost:{internet}\r\n\r\n"
            f"GET /inside HTTP/1.1\r\nHost: localhost\r\n\r\n".encode(),
        )
        wrong_port = await ask(proxy, f"CONNECT localhost:{other} HTTP/1.1\r\n\r\n".encode())
    assert tunnel.startswith(b"HTTP/1.1 200 Connection Established\r\n\r\nHTTP/1.1 200 OK")
    assert b"path=/inside" in tunnel
    assert wrong_port.startswith(b"HTTP/1.1 403")
    through, refused = proxy.log.entries
    assert through.allowed and through.method == "CONNECT" and through.bytes_up > 0
    assert not refused.allowed and f"localhost:{other} is not in" in refused.reason


async def test_public_refuses_loopback_private_and_rebinding(tmp_path: Path, internet: int) -> None:
    """`public` with the default blocked networks: loopback, private and metadata addresses
    are refused, by literal or by a name resolving to one (`localhost`: DNS rebinding)."""
    network = NetworkSpec(mode="public")
    async with proxy_for(tmp_path, network, deployment(None)) as proxy:
        answers = [
            await ask(proxy, f"GET http://127.0.0.1:{internet}/ HTTP/1.1\r\n\r\n".encode()),
            await ask(proxy, f"CONNECT localhost:{internet} HTTP/1.1\r\n\r\n".encode()),
            await ask(proxy, b"GET http://169.254.169.254/latest/meta-data HTTP/1.1\r\n\r\n"),
            await ask(proxy, b"CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n"),
            await ask(proxy, b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n"),
        ]
    assert all(a.startswith(b"HTTP/1.1 403") for a in answers), answers
    reasons = [e.reason for e in proxy.log.entries]
    assert "in the blocked network 127.0.0.0/8" in reasons[0]
    assert reasons[1] == "localhost resolves to 127.0.0.1, in the blocked network 127.0.0.0/8"
    assert "169.254.0.0/16" in reasons[2] and "10.0.0.0/8" in reasons[3]
    assert "::1/128" in reasons[4]
    assert not any(e.allowed for e in proxy.log.entries)
    assert [e.ip for e in proxy.log.entries][:2] == ["127.0.0.1", "127.0.0.1"]


async def test_public_reaches_an_exempt_port_only(tmp_path: Path, internet: int) -> None:
    other = await free_port()
    async with proxy_for(tmp_path, NetworkSpec(mode="public"), deployment(internet)) as proxy:
        ok = await ask(proxy, f"GET http://localhost:{internet}/ HTTP/1.1\r\n\r\n".encode())
        no = await ask(proxy, f"GET http://localhost:{other}/ HTTP/1.1\r\n\r\n".encode())
    assert ok.startswith(b"HTTP/1.1 200") and no.startswith(b"HTTP/1.1 403")


async def test_the_log_is_one_json_line_per_attempt(tmp_path: Path, internet: int) -> None:
    network = NetworkSpec(mode="allowlist", allowed_hosts=["localhost"])
    async with proxy_for(tmp_path, network, deployment(internet)) as proxy:
        await ask(proxy, f"GET http://localhost:{internet}/ HTTP/1.1\r\n\r\n".encode())
        await ask(proxy, b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n")
        bad = await ask(proxy, b"GET /not-a-proxy-request HTTP/1.1\r\n\r\n")
    assert bad.startswith(b"HTTP/1.1 400")
    lines = [json.loads(line) for line in proxy.log.jsonl().decode().splitlines()]
    assert [(e["host"], e["allowed"]) for e in lines] == [("localhost", True), ("pypi.org", False)]
    assert set(lines[0]) == {
        "time",
        "method",
        "host",
        "port",
        "ip",
        "allowed",
        "reason",
        "bytes_up",
        "bytes_down",
        "duration_s",
    }


def test_egress_off_refuses_with_the_reason() -> None:
    assert egress_refusal(NetworkSpec(), Settings()) is None
    reason = egress_refusal(NetworkSpec(mode="public"), Settings())
    assert reason is not None and "POLAR_EGRESS=off" in reason and "'public'" in reason
    assert egress_refusal(NetworkSpec(mode="public"), Settings(egress="proxy")) is None
    assert Settings().egress == "off"
    assert "127.0.0.0/8" in Settings().egress_blocked_networks  # loopback blocked by default


async def test_the_forwarders_nest_for_one_command(tmp_path: Path, internet: int) -> None:
    """The in-sandbox side as a sandbox runs it: the egress forwarder outermost, a command
    behind it that fetches through HTTP_PROXY with curl."""
    network = NetworkSpec(mode="allowlist", allowed_hosts=["localhost"])
    async with proxy_for(tmp_path, network, deployment(internet)) as proxy:
        command = (
            f"curl -sS --max-time 10 http://localhost:{internet}/via-forwarder; "
            "echo; curl -s -o /dev/null -w '%{http_code}' http://refused.invalid/"
        )
        port = await free_port()
        line = with_forwarder(command, str(proxy.channel_dir), port=port, socket_name=EGRESS_SOCKET)
        proc = subprocess.Popen(
            ["bash", "-c", line],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # the forked forwarder with it: killed below
            env={"PATH": "/usr/bin:/bin", "http_proxy": f"http://127.0.0.1:{port}"},
        )
        try:
            stdout, stderr = await asyncio.to_thread(proc.communicate, timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert "path=/via-forwarder" in stdout, stderr
    assert stdout.rstrip().endswith("403"), stdout
    assert [e.allowed for e in proxy.log.entries] == [True, False]


class _UnsealedRuntime:
    """What open_egress asks of a runtime, as an unsealed `local` one answers it (no
    channel in the sandbox: its commands are on the host's network)."""

    kind = "local"

    def channel_in_sandbox(self, handle: RuntimeHandle) -> str | None:
        return None

    def channel_dir(self, handle: RuntimeHandle) -> Path:
        raise AssertionError("no proxy may be opened for an unsealed runtime")


async def test_an_unsealed_runtime_or_egress_off_refuses_rather_than_opening(
    tmp_path: Path,
) -> None:
    handle = RuntimeHandle(kind="local", session_id="s", workdir=str(tmp_path), host="h")
    runtime = cast(Runtime, _UnsealedRuntime())
    public = NetworkSpec(mode="public")
    with pytest.raises(EgressRefused, match="not sealed .*POLAR_ALLOW_UNSEALED"):
        async with open_egress(runtime, handle, public, Settings(egress="proxy")):
            pass
    with pytest.raises(EgressRefused, match="POLAR_EGRESS=off"):
        async with open_egress(runtime, handle, public, Settings()):
            pass
    async with open_egress(runtime, handle, NetworkSpec(), Settings()) as door:
        assert door is None  # sealed: nothing to open, nothing asked of the runtime


async def test_a_network_entry_admits_a_name_by_its_address(tmp_path: Path, internet: int) -> None:
    """An IP or CIDR entry holds the address a name resolves to, as a firewall would; the
    blocked networks still apply (the port is exempt here, another is not)."""
    other = await free_port()
    network = NetworkSpec(mode="allowlist", allowed_hosts=["127.0.0.0/8"])
    async with proxy_for(tmp_path, network, deployment(internet)) as proxy:
        ok = await ask(proxy, f"GET http://localhost:{internet}/ HTTP/1.1\r\n\r\n".encode())
        blocked = await ask(proxy, f"GET http://localhost:{other}/ HTTP/1.1\r\n\r\n".encode())
    assert ok.startswith(b"HTTP/1.1 200") and blocked.startswith(b"HTTP/1.1 403")
    assert "blocked network 127.0.0.0/8" in proxy.log.entries[1].reason

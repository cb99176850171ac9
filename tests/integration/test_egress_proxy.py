"""A session's egress proxy (activities/runtimes/network/egress_proxy.py) enforces its network.

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
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from activities.runtimes.base import Runtime
from activities.runtimes.network.channel import with_forwarder
from activities.runtimes.network.egress import EgressRefused, egress_refusal, open_egress
from activities.runtimes.network.egress_policy import EgressPolicy
from activities.runtimes.network.egress_proxy import EGRESS_SOCKET, HEAD_TIMEOUT_S, EgressProxy
from activities.shell_command import run_shell
from polar.contracts import RuntimeHandle
from polar.settings import Settings
from polar.tasks.spec import NetworkSpec
from tests.support.polling import wait_for

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


SLOWLORIS = r"""
import json, socket, sys, time
path, count, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
held, refused, started = [], 0, time.monotonic()
for _ in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(path)
        s.sendall(b"CONNECT example.com:443 HTTP/1.1\r\nX-Slow: ")
        held.append(s)
    except OSError:
        refused += 1
        s.close()
print(json.dumps({"held": len(held), "refused": refused, "s": time.monotonic() - started}))
sys.stdout.flush()
time.sleep(hold)
"""


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_slowloris_on_egress_ends_the_attacker_never_its_neighbour(
    tmp_path: Path, internet: int
) -> None:
    """A session floods its egress socket with 1,000 half-open connections (from another
    process, as the sandbox's would be): the 65th shuts its proxy at the accept, before a
    byte is read: its harness is ended, the open connections cut, the rest refused at
    once, and this process (the worker) holds no more descriptors than the cap allows. A
    neighbour's proxy serves on."""
    network = NetworkSpec(mode="allowlist", allowed_hosts=["localhost"])
    settings = deployment(internet)
    cap = settings.egress_max_connections
    assert cap == 64
    async with (
        EgressProxy(tmp_path / "a", EgressPolicy.of(network, settings), cap) as attacked,
        EgressProxy(tmp_path / "n", EgressPolicy.of(network, settings), cap) as neighbour,
    ):
        stderr = tmp_path / "harness.err"
        harness = run_shell(
            "sleep 60", cwd=tmp_path, env={}, stdout=tmp_path / "o", stderr=stderr, timeout_s=120
        )
        guarded = asyncio.create_task(attacked.run_guarded(harness, stderr))
        before, peak = _fds(), [0]
        attacker = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            SLOWLORIS,
            str(attacked.socket_path),
            "1000",
            "30",
            stdout=asyncio.subprocess.PIPE,
        )
        assert attacker.stdout is not None
        try:
            line = asyncio.ensure_future(attacker.stdout.readline())
            while not line.done():
                peak[0] = max(peak[0], _fds())
                await asyncio.sleep(0.002)
            report = json.loads(line.result())
            print(f"slowloris on egress.sock: {report}, worker fds {before} -> peak {peak[0]}")
            outcome = await asyncio.wait_for(guarded, 30)
            await wait_for(lambda: attacked.guard.open == 0, 10, "the held connections cut")
            answer = await ask(
                neighbour, f"GET http://localhost:{internet}/n HTTP/1.1\r\n\r\n".encode()
            )
        finally:
            attacker.kill()
            await attacker.wait()
    # connected: the admitted, the one that shut the proxy, the kernel's queue (cap + 1)
    assert report["held"] <= 2 * cap + 2 and report["refused"] == 1000 - report["held"], report
    assert report["s"] < 15, report
    assert peak[0] - before <= cap + 8, (before, peak, report)  # the admitted, and a few
    assert attacked.breach is not None and f"more than {cap} connections" in attacked.breach
    assert "egress socket (POLAR_EGRESS_MAX_CONNECTIONS)" in attacked.breach
    assert outcome.exit_code is None and outcome.limit_exceeded is not None
    assert "the egress socket was shut" in outcome.limit_exceeded
    assert "polar: the egress socket was shut" in stderr.read_text()
    assert attacked.log.entries == []  # no head was ever read
    assert json.loads(attacked.log.jsonl())["shut"] == attacked.breach
    assert answer.startswith(b"HTTP/1.1 200 OK") and neighbour.breach is None


async def test_a_request_head_that_does_not_come_is_cut_in_seconds(
    tmp_path: Path, internet: int
) -> None:
    assert HEAD_TIMEOUT_S <= 5
    network = NetworkSpec(mode="public")
    async with proxy_for(tmp_path, network, deployment(internet)) as proxy:
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        started = asyncio.get_running_loop().time()
        writer.write(b"CONNECT example.com:443 HTTP/1.1\r\nX-Slow: ")
        answer = await asyncio.wait_for(reader.read(), HEAD_TIMEOUT_S + 5)
        took = asyncio.get_running_loop().time() - started
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert HEAD_TIMEOUT_S - 0.5 < took < HEAD_TIMEOUT_S + 2, took
    assert proxy.guard.header_timeouts == 1 and proxy.breach is None


def _host_address() -> str:
    """One of this machine's non-loopback interface addresses (its default route's: a UDP
    connect sends nothing), or the loopback alias 127.0.0.2 without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.2"


async def test_public_never_reaches_an_address_of_the_workers_own_host(tmp_path: Path) -> None:
    """A service on a host interface address, through a deployment whose exemption is a
    network holding it (an internal mirror's subnet): refused, the host's own; an exemption
    naming that address itself is the operator's explicit exception, and is served."""
    address = _host_address()
    network = ipaddress.ip_network(f"{address}/24", strict=False)
    server = await asyncio.start_server(_hello, "0.0.0.0", 0)
    port = int(server.sockets[0].getsockname()[1])
    request = f"GET http://{address}:{port}/ HTTP/1.1\r\n\r\n".encode()
    public = NetworkSpec(mode="public")
    async with server:
        by_network = Settings(egress="proxy", egress_exempt=[f"{network}:{port}"])
        async with proxy_for(tmp_path / "net", public, by_network) as proxy:
            refused = await ask(proxy, request)
        by_name = Settings(egress="proxy", egress_exempt=[f"{address}:{port}"])
        async with proxy_for(tmp_path / "name", public, by_name) as named:
            served = await ask(named, request)
    assert refused.startswith(b"HTTP/1.1 403"), (address, refused)
    [entry] = proxy.log.entries
    assert entry.reason.startswith(f"{address} resolves to {address}, the worker host's own")
    assert served.startswith(b"HTTP/1.1 200") and BODY in served, served


async def _hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(BODY) + BODY
        )
        await writer.drain()
    finally:
        writer.close()


async def test_ipv6_spellings_of_loopback_are_refused_by_the_proxy(
    tmp_path: Path, internet: int
) -> None:
    """`public`, the blocked networks emptied: each IPv6 spelling of 127.0.0.1 or the metadata
    address is refused before any connection, a reason naming what it embeds."""
    settings = Settings(egress="proxy", egress_blocked_networks=[])
    spellings = [
        "::ffff:127.0.0.1",
        "::7f00:1",
        "::ffff:0:7f00:1",
        "64:ff9b::7f00:1",
        "64:ff9b:1::a9fe:a9fe",
        "2002:7f00:1::1",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
    ]
    async with proxy_for(tmp_path, NetworkSpec(mode="public"), settings) as proxy:
        answers = [
            await ask(proxy, f"CONNECT [{s}]:{internet} HTTP/1.1\r\n\r\n".encode())
            for s in spellings
        ]
    assert all(a.startswith(b"HTTP/1.1 403") for a in answers), answers
    for spelling, entry in zip(spellings, proxy.log.entries, strict=True):
        assert not entry.allowed and any(v4 in entry.reason for v4 in ("127.0.0", "169.254"))
        assert entry.reason.startswith(f"{spelling} resolves to"), entry.reason

"""A session's egress, where its task asks for network and the deployment allows it.

A session has no network of its own (docker/podman `--network none`, the local
runtime's own network namespace). A task whose `runtime.network` is `public` or
`allowlist` still gets none: on a worker with `POLAR_EGRESS=proxy` its harness
(and a Harbor verifier whose network asks for it) gets a worker-side HTTP proxy
(`EgressProxy`) on a second Unix socket in the session's channel dir,
`egress.sock`, which a second in-sandbox forwarder serves at
`http://127.0.0.1:3128` (`EgressDoor.wrap`), named in HTTP_PROXY/HTTPS_PROXY
(and lower-case), with NO_PROXY for loopback (the gateway's channel).

The proxy takes `CONNECT host:port` (HTTPS and any TLS: the bytes are spliced, never
read) and absolute-form plain HTTP (`GET http://host/path`: sent on as origin-form,
`Connection: close`, one request per connection). Each attempt is decided by
`EgressPolicy`: `allowlist` only the task's hosts; `public` anything; in both,
the name is resolved on the worker and each address checked against the
deployment's blocked networks (loopback, private, link-local, CGNAT, multicast,
metadata: POLAR_EGRESS_BLOCKED_NETWORKS), so a name that resolves (or rebinds)
to 127.0.0.1 is refused; the proxy connects to the address it checked, never
resolving again. POLAR_EGRESS_EXEMPT lists `address:port` pairs (an internal
package mirror, a test's server) that pass the blocked networks. A refused
attempt gets `403` with the reason (header `x-polar-egress: refused`).

Every attempt is logged (`EgressLog`: host, port, resolved address, allowed or
refused and why, bytes each way, duration); the run uploads it as the session's
`egress.jsonl` artifact.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import shutil
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from activities.runtimes.base import Runtime
from activities.runtimes.channel import FORWARDER_NAME, FORWARDER_SCRIPT, _bind_unix, with_forwarder
from polar.contracts import RuntimeHandle
from polar.network_policy import (
    AllowedHost,
    IPAddress,
    IPNetwork,
    blocked_networks,
    blocking_network,
    normal_host,
    parse_allowed_host,
)
from polar.settings import Settings
from polar.tasks.spec import NetworkSpec

EGRESS_SOCKET = "egress.sock"
EGRESS_PORT = 3128
"""Where the sandbox's egress forwarder listens (its HTTP_PROXY)."""
EGRESS_LOG = "egress.jsonl"
MAX_HEAD_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 10.0
HEAD_TIMEOUT_S = 30.0
MAX_LOG_ENTRIES = 10_000
CHUNK = 64 * 1024
log = logging.getLogger("polar.worker")


class EgressRefused(Exception):
    """A session's network the worker cannot grant (egress off, an unsealed runtime)."""


def egress_refusal(network: NetworkSpec, settings: Settings, what: str = "runtime") -> str | None:
    """Why this worker cannot give a task's `network`, or None (sealed, or egress on)."""
    if network.sealed or settings.egress == "proxy":
        return None
    return (
        f"{what}.network.mode is {network.mode!r}, but this deployment has no egress policy "
        "turned on (POLAR_EGRESS=off): its sessions are sealed, with no network but the "
        "gateway. Run it on workers with POLAR_EGRESS=proxy, or set the task's network to "
        "'none' (Harbor: network_mode = \"no-network\") if it needs none"
    )


@dataclass(frozen=True)
class Exempt:
    """An address (or network) and port that pass the blocked networks."""

    network: IPNetwork
    port: int | None

    @classmethod
    def parse(cls, entry: str) -> Exempt:
        parsed = parse_allowed_host(entry)
        if parsed.network is None:
            raise ValueError(f"egress exempt {entry!r}: an IP address or network, not a name")
        return cls(parsed.network, parsed.port)

    def holds(self, ip: IPAddress, port: int) -> bool:
        return (self.port is None or self.port == port) and (
            ip.version == self.network.version and ip in self.network
        )


@dataclass(frozen=True)
class EgressPolicy:
    """What one session's connections may reach: the task's mode and hosts, the
    deployment's blocked networks and exemptions."""

    mode: str
    allowed: tuple[AllowedHost, ...]
    blocked: tuple[IPNetwork, ...]
    exempt: tuple[Exempt, ...] = ()

    @classmethod
    def of(cls, network: NetworkSpec, settings: Settings) -> EgressPolicy:
        return cls(
            network.mode,
            tuple(parse_allowed_host(h) for h in network.allowed_hosts),
            blocked_networks(settings.egress_blocked_networks),
            tuple(Exempt.parse(e) for e in settings.egress_exempt),
        )

    def name_refusal(self, host: str, port: int) -> str | None:
        """Why `host:port` is refused before any lookup (allowlist: no entry names it and no
        network entry could hold it), or None."""
        if self.mode == "public":
            return None
        if self.mode != "allowlist":
            return f"the session's network is {self.mode!r}"
        for entry in self.allowed:
            if entry.network is None and entry.matches(host, port, None):
                return None
            if entry.network is not None and entry.port in (None, port):
                return None  # its address decides (address_refusal)
        return f"{host}:{port} is not in the task's allowed_hosts"

    def address_refusal(self, host: str, port: int, ip: IPAddress) -> str | None:
        """Why a connection to `host:port` at `ip` is refused, or None."""
        if self.mode == "allowlist" and not any(e.matches(host, port, ip) for e in self.allowed):
            return f"{host}:{port} ({ip}) is not in the task's allowed_hosts"
        if any(e.holds(ip, port) for e in self.exempt):
            return None
        network = blocking_network(ip, self.blocked)
        if network is not None:
            return f"{host} resolves to {ip}, in the blocked network {network}"
        return None


@dataclass
class EgressEntry:
    """One connection attempt through a session's egress proxy."""

    time: float
    method: str
    host: str
    port: int
    ip: str | None = None
    allowed: bool = False
    reason: str = ""
    bytes_up: int = 0
    bytes_down: int = 0
    duration_s: float = 0.0


@dataclass
class EgressLog:
    """The attempts of one session's proxy, in order (the first MAX_LOG_ENTRIES kept)."""

    entries: list[EgressEntry] = field(default_factory=list)
    dropped: int = 0

    def add(self, entry: EgressEntry) -> None:
        if len(self.entries) < MAX_LOG_ENTRIES:
            self.entries.append(entry)
        else:
            self.dropped += 1

    def jsonl(self) -> bytes:
        lines = [json.dumps(asdict(e), sort_keys=True) for e in self.entries]
        if self.dropped:
            lines.append(json.dumps({"dropped": self.dropped}))
        return ("\n".join(lines) + "\n").encode() if lines else b""


def _answer(status: str, reason: str, refused: bool = False) -> bytes:
    body = f"polar egress: {reason}\n".encode()
    extra = "x-polar-egress: refused\r\n" if refused else ""
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {len(body)}\r\n"
        f"{extra}connection: close\r\n\r\n"
    ).encode() + body


def _target(method: str, target: str) -> tuple[str, int, str] | str:
    """(host, port, origin-form path) of a CONNECT authority or an absolute http:// URL; a
    string saying what is wrong otherwise."""
    if method == "CONNECT":
        authority, path = target, ""
    elif target.lower().startswith("http://"):
        rest = target[7:]
        slash = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
        authority, path = rest[:slash], rest[slash:] or "/"
        if path.startswith("?"):
            path = "/" + path
    elif target.lower().startswith("https://"):
        return "an https:// URL goes through CONNECT (set HTTPS_PROXY)"
    else:
        return "not a proxy request (CONNECT host:port or an absolute http:// URL)"
    if "@" in authority:
        return "credentials in the URL are not passed on"
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = authority.partition(":")
    default = 443 if method == "CONNECT" else 80
    if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
        return f"bad port in {authority!r}"
    if not host:
        return f"no host in {target!r}"
    return normal_host(host), int(port_text) if port_text else default, path


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, count: list[int]) -> None:
    """Copy `src` to `dst` until EOF (then half-close `dst`), counting bytes in count[0]."""
    try:
        while data := await src.read(CHUNK):
            count[0] += len(data)
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except (ConnectionError, OSError):
        dst.transport.abort()


class EgressProxy:
    """The worker side of one session's egress: an HTTP proxy on `channel_dir/egress.sock`
    enforcing `policy`, its attempts in `log`."""

    def __init__(self, channel_dir: Path, policy: EgressPolicy, max_connections: int = 64) -> None:
        self.channel_dir = Path(channel_dir)
        self.policy = policy
        self.max_connections = max_connections
        self.log = EgressLog()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._open = 0

    @property
    def socket_path(self) -> Path:
        return self.channel_dir / EGRESS_SOCKET

    async def __aenter__(self) -> EgressProxy:
        self.channel_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        target = self.channel_dir / FORWARDER_NAME
        if not target.exists():
            shutil.copyfile(FORWARDER_SCRIPT, target)
            target.chmod(0o644)
        self.socket_path.unlink(missing_ok=True)
        sock = _bind_unix(self.socket_path)
        self._server = await asyncio.start_unix_server(self._serve, sock=sock)
        self.socket_path.chmod(0o666)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        self.socket_path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._open += 1
        try:
            await self._handle(reader, writer)
            await writer.drain()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            writer.transport.abort()
        finally:
            self._open -= 1
            self._tasks.discard(task)
            writer.close()  # what was written (an answer, the last bytes) goes out first

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except (TimeoutError, asyncio.LimitOverrunError, asyncio.IncompleteReadError):
            writer.write(_answer("400 Bad Request", "no complete request head"))
            return
        if len(head) > MAX_HEAD_BYTES:
            writer.write(_answer("431 Request Header Fields Too Large", "request head too big"))
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            writer.write(_answer("400 Bad Request", "not an HTTP/1.x request line"))
            return
        method, target, version = parts
        parsed = _target(method, target)
        if isinstance(parsed, str):
            writer.write(_answer("400 Bad Request", parsed))
            return
        host, port, path = parsed
        entry = EgressEntry(time=round(time.time(), 3), method=method, host=host, port=port)
        self.log.add(entry)
        started = time.monotonic()
        try:
            await self._connect(
                entry, reader, writer, head_lines=lines[1:], path=path, version=version
            )
        finally:
            entry.duration_s = round(time.monotonic() - started, 3)

    async def _connect(
        self,
        entry: EgressEntry,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        head_lines: list[str],
        path: str,
        version: str,
    ) -> None:
        host, port = entry.host, entry.port
        if self._open > self.max_connections:
            return self._refuse(writer, entry, f"more than {self.max_connections} connections")
        refusal = self.policy.name_refusal(host, port)
        if refusal is not None:
            return self._refuse(writer, entry, refusal)
        try:
            infos = await asyncio.wait_for(
                asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM),
                CONNECT_TIMEOUT_S,
            )
        except (OSError, TimeoutError) as exc:
            entry.reason = f"cannot resolve {host}: {exc}"
            writer.write(_answer("502 Bad Gateway", entry.reason))
            return None
        addresses = list(dict.fromkeys(ipaddress.ip_address(i[4][0]) for i in infos))
        refusals = []
        chosen = None
        for ip in addresses:
            why = self.policy.address_refusal(host, port, ip)
            if why is None:
                chosen = ip
                break
            refusals.append(why)
        if chosen is None:
            entry.ip = str(addresses[0]) if addresses else None
            return self._refuse(writer, entry, "; ".join(refusals) or f"{host}: no address")
        entry.ip = str(chosen)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(str(chosen), port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            entry.reason = f"cannot connect to {chosen}:{port}: {exc or type(exc).__name__}"
            writer.write(_answer("502 Bad Gateway", entry.reason))
            return None
        entry.allowed = True
        try:
            up, down = [0], [0]
            if entry.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await writer.drain()
            else:
                origin_head = _origin_head(entry.method, path, version, head_lines)
                up[0] = len(origin_head)
                up_writer.write(origin_head)
            sending = asyncio.ensure_future(_pump(reader, up_writer, up))
            try:
                # the far end done, the connection is: the client gets nothing more
                await _pump(up_reader, writer, down)
            finally:
                sending.cancel()
                with contextlib.suppress(BaseException):
                    await sending
                entry.bytes_up, entry.bytes_down = up[0], down[0]
        finally:
            up_writer.transport.abort()
        return None

    def _refuse(self, writer: asyncio.StreamWriter, entry: EgressEntry, reason: str) -> None:
        entry.reason = reason
        writer.write(_answer("403 Forbidden", reason, refused=True))


HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization"})


def _origin_head(method: str, path: str, version: str, header_lines: list[str]) -> bytes:
    """The request head sent upstream: origin-form, proxy headers dropped, one request."""
    kept = []
    for line in header_lines:
        if not line:
            continue
        name = line.split(":", 1)[0].strip().lower()
        if name not in HOP_BY_HOP:
            kept.append(line)
    kept.append("Connection: close")
    return (f"{method} {path} {version}\r\n" + "\r\n".join(kept) + "\r\n\r\n").encode("latin-1")


@dataclass
class EgressDoor:
    """An open egress for one command: how to wrap it, its env, and the proxy's log."""

    proxy: EgressProxy
    channel_in_sandbox: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{EGRESS_PORT}"

    @property
    def env(self) -> dict[str, str]:
        no_proxy = "127.0.0.1,localhost,::1"
        return {
            "HTTP_PROXY": self.url,
            "HTTPS_PROXY": self.url,
            "http_proxy": self.url,
            "https_proxy": self.url,
            "NO_PROXY": no_proxy,
            "no_proxy": no_proxy,
        }

    def wrap(self, command: str) -> str:
        """`command` behind the sandbox's egress forwarder (outermost: it starts first)."""
        return with_forwarder(
            command, self.channel_in_sandbox, port=EGRESS_PORT, socket_name=EGRESS_SOCKET
        )


@contextlib.asynccontextmanager
async def open_egress(
    runtime: Runtime,
    handle: RuntimeHandle,
    network: NetworkSpec,
    settings: Settings,
    what: str = "runtime",
) -> AsyncIterator[EgressDoor | None]:
    """The egress a command of `handle` gets while the block runs: None when `network` is
    sealed; EgressRefused where this worker cannot give it (egress off, or a runtime with
    no sealed channel, whose commands would reach the network around any policy)."""
    if network.sealed:
        yield None
        return
    refusal = egress_refusal(network, settings, what)
    if refusal is not None:
        raise EgressRefused(refusal)
    channel = runtime.channel_in_sandbox(handle)
    if channel is None:
        raise EgressRefused(
            f"{what}.network.mode is {network.mode!r}, but this {handle.kind} runtime is not "
            "sealed (POLAR_ALLOW_UNSEALED): its commands reach the host's network around any "
            "egress policy, so none is granted"
        )
    policy = EgressPolicy.of(network, settings)
    async with EgressProxy(
        runtime.channel_dir(handle), policy, settings.egress_max_connections
    ) as proxy:
        yield EgressDoor(proxy, channel)

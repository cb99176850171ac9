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
the name is resolved on the worker and each address checked: never the worker
host's own (every address of its interfaces and its local routes, read from
the kernel at each attempt: `host_networks`), never one that is not global
unicast nor an IPv6 spelling of one (polar/network_policy.py `not_global`:
IPv4-mapped, -compatible, SIIT, NAT64, 6to4, Teredo), never one in the
deployment's blocked networks (POLAR_EGRESS_BLOCKED_NETWORKS, extra blocks), so
a name that resolves (or rebinds) to 127.0.0.1 is refused; the proxy connects
to the address it checked, never resolving again. POLAR_EGRESS_EXEMPT lists
`address:port` pairs (an internal package mirror, a test's server) that pass
those blocks; a network entry never opens an address of the host's own. A
refused attempt gets `403` with the reason (header `x-polar-egress: refused`).

The socket is bounded as the gateway channel is (`EgressProxy`): connections
counted at the accept, at most POLAR_EGRESS_MAX_CONNECTIONS at once, a request
head within HEAD_TIMEOUT_S; the first connection past the cap ends the session.

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
import os
import shutil
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from activities.runtimes.base import Runtime
from activities.runtimes.network.channel import (
    FORWARDER_NAME,
    FORWARDER_SCRIPT,
    ChannelLimits,
    _bind_unix,
    _Guard,
    run_until_shut,
    with_forwarder,
)
from activities.shell_command import ProcessOutcome
from polar.contracts import RuntimeHandle
from polar.network_policy import (
    AllowedHost,
    IPAddress,
    IPNetwork,
    blocked_networks,
    blocking_network,
    embedded_ipv4,
    normal_host,
    not_global,
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
HEAD_TIMEOUT_S = 5.0
"""How long a connection's request head may take from its accept (a client sends its
CONNECT or GET at once): a slow one is answered 408 and closed."""
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

    def names(self, ip: IPAddress) -> bool:
        """Whether this entry is `ip` itself (not a network that holds it)."""
        return self.network.num_addresses == 1 and ip == self.network.network_address


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

    def address_refusal(
        self, host: str, port: int, ip: IPAddress, own: frozenset[IPNetwork] = frozenset()
    ) -> str | None:
        """Why a connection to `host:port` at `ip` is refused, or None. `own`: what the
        worker's host answers as itself (`host_networks`), never reached but through an
        exemption naming the address itself (an exempt network never opens it)."""
        if self.mode == "allowlist" and not any(e.matches(host, port, ip) for e in self.allowed):
            return f"{host}:{port} ({ip}) is not in the task's allowed_hosts"
        mine = own_network(ip, own)
        exempt = [e for e in self.exempt if e.holds(ip, port)]
        if exempt and (mine is None or any(e.names(ip) for e in exempt)):
            return None
        network = blocking_network(ip, self.blocked)
        if network is not None:
            return f"{host} resolves to {ip}, in the blocked network {network}"
        if mine is not None:
            return f"{host} resolves to {ip}, the worker host's own ({mine})"
        why = not_global(ip)
        if why is not None:
            return f"{host} resolves to {why}"
        return None


def own_network(ip: IPAddress, own: frozenset[IPNetwork]) -> IPNetwork | None:
    """The one of `own` that holds `ip`, or an IPv4 address it embeds; None if none does."""
    candidates: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        candidates += embedded_ipv4(ip)[1]
    for candidate in candidates:
        for network in own:
            if candidate.version == network.version and candidate in network:
                return network
    return None


_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, interface index
_RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol,
#                                       scope, type, flags
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWADDR, RTM_GETADDR, RTM_NEWROUTE, RTM_GETROUTE = 20, 22, 24, 26
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_TABLE = 1, 15
RT_TABLE_LOCAL = 255
RTN_LOCAL, RTN_BROADCAST, RTN_ANYCAST = 2, 3, 4


def _netlink_dump(request: int, body: bytes) -> Iterator[tuple[int, bytes]]:
    """Each message (type, payload) the kernel's answer to a NETLINK_ROUTE dump holds."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.settimeout(5.0)
        sock.bind((0, 0))
        flags = NLM_F_REQUEST | NLM_F_DUMP
        sock.send(_NLMSG.pack(_NLMSG.size + len(body), request, flags, 1, 0) + body)
        while True:
            data = sock.recv(1 << 16)  # a dump's datagrams are at most 32 KiB
            offset = 0
            while offset + _NLMSG.size <= len(data):
                length, kind = _NLMSG.unpack_from(data, offset)[:2]
                if length < _NLMSG.size:
                    raise OSError("netlink: a malformed answer")
                if kind == NLMSG_DONE:
                    return
                if kind == NLMSG_ERROR:
                    (error,) = struct.unpack_from("=i", data, offset + _NLMSG.size)
                    raise OSError(-error, f"netlink: {os.strerror(-error)}")
                yield kind, data[offset + _NLMSG.size : offset + length]
                offset += (length + 3) & ~3


def _attributes(payload: bytes, offset: int) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    while offset + 4 <= len(payload):
        length, kind = struct.unpack_from("=HH", payload, offset)
        if length < 4:
            break
        found.setdefault(kind, payload[offset + 4 : offset + length])
        offset += (length + 3) & ~3
    return found


def _address(family: int, raw: bytes | None) -> IPAddress | None:
    if family == socket.AF_INET and raw is not None and len(raw) == 4:
        return ipaddress.IPv4Address(raw)
    if family == socket.AF_INET6 and raw is not None and len(raw) == 16:
        return ipaddress.IPv6Address(raw)
    return None


def host_networks() -> frozenset[IPNetwork]:
    """What the worker's host answers as itself, read from its kernel now (netlink, in the
    worker's network namespace): every address of its interfaces, and every destination its
    local routing table delivers to it (the whole loopback range, subnet broadcasts, anycast
    and AnyIP routes). OSError where the kernel cannot say."""
    found: set[IPNetwork] = set()
    for kind, msg in _netlink_dump(RTM_GETADDR, _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
        if kind == RTM_NEWADDR and len(msg) >= _IFADDRMSG.size:
            attrs = _attributes(msg, _IFADDRMSG.size)
            for raw in (attrs.get(IFA_ADDRESS), attrs.get(IFA_LOCAL)):
                address = _address(msg[0], raw)
                if address is not None:
                    found.add(ipaddress.ip_network(address))
    for kind, msg in _netlink_dump(RTM_GETROUTE, _RTMSG.pack(socket.AF_UNSPEC, *[0] * 8)):
        if kind != RTM_NEWROUTE or len(msg) < _RTMSG.size:
            continue
        family, dst_len, _, _, table, _, _, route_type, _ = _RTMSG.unpack_from(msg)
        attrs = _attributes(msg, _RTMSG.size)
        if len(attrs.get(RTA_TABLE, b"")) == 4:
            (table,) = struct.unpack("=I", attrs[RTA_TABLE])
        if table != RT_TABLE_LOCAL or route_type not in (RTN_LOCAL, RTN_BROADCAST, RTN_ANYCAST):
            continue
        address = _address(family, attrs.get(RTA_DST))
        if address is not None:
            found.add(ipaddress.ip_network((address, dst_len), strict=False))
    return frozenset(found)


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
    shut: str | None = None
    """Why the proxy stopped serving its session (it passed a cap), if it did."""

    def add(self, entry: EgressEntry) -> None:
        if len(self.entries) < MAX_LOG_ENTRIES:
            self.entries.append(entry)
        else:
            self.dropped += 1

    def jsonl(self) -> bytes:
        lines = [json.dumps(asdict(e), sort_keys=True) for e in self.entries]
        if self.dropped:
            lines.append(json.dumps({"dropped": self.dropped}))
        if self.shut:
            lines.append(json.dumps({"shut": self.shut}))
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


class _Admitted(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol for one connection the proxy admitted: its end frees its
    place under the cap."""

    def __init__(self, proxy: EgressProxy, reader: asyncio.StreamReader) -> None:
        super().__init__(reader)
        self._proxy = proxy
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._proxy._transports.add(transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._proxy._transports.discard(self._transport)
            self._transport = None
            self._proxy.guard.open -= 1
        super().connection_lost(exc)


class EgressProxy:
    """The worker side of one session's egress: an HTTP proxy on `channel_dir/egress.sock`
    enforcing `policy`, its attempts in `log`.

    Its caps are the gateway channel's (`ChannelLimits`, `_Guard`), counted at the accept,
    before a byte is read: at most `max_connections` open at once (the kernel's accept
    queue no deeper), each request head within HEAD_TIMEOUT_S of its accept (408 and closed
    past it). The first connection past the cap is closed as it is accepted and shuts the
    proxy: it stops listening, every open connection (and its upstream) is cut, `breach`
    says why, and `run_guarded` ends the session's harness. So a session holds at most
    `max_connections` (+1, a moment) of the worker's descriptors on this socket, plus one
    upstream each, whatever it tries."""

    def __init__(
        self,
        channel_dir: Path,
        policy: EgressPolicy,
        max_connections: int = ChannelLimits.max_connections,
    ) -> None:
        self.channel_dir = Path(channel_dir)
        self.policy = policy
        self.max_connections = max_connections
        self.log = EgressLog()
        limits = ChannelLimits(max_connections, HEAD_TIMEOUT_S, MAX_HEAD_BYTES)
        self.guard = _Guard(limits, self._breach, "egress socket", "POLAR_EGRESS_MAX_CONNECTIONS")
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._transports: set[asyncio.Transport] = set()
        self._shut = asyncio.Event()

    @property
    def socket_path(self) -> Path:
        return self.channel_dir / EGRESS_SOCKET

    @property
    def breach(self) -> str | None:
        """Why this session's egress was shut (it passed a cap); None while it serves."""
        return self.guard.breach

    async def run_guarded(self, run: Awaitable[ProcessOutcome], stderr: Path) -> ProcessOutcome:
        """`run` (the harness), ended if its egress is shut first (`run_until_shut`)."""
        return await run_until_shut(
            run, self._shut, lambda: f"the egress socket was shut: {self.breach}", stderr
        )

    def _breach(self, reason: str) -> None:
        """Stop serving at once: no new connection, the open ones (and their upstreams) cut.
        Called by the accept loop (`_Guard.admit`), which then ends: no accept is pending on
        the listener it closes."""
        log.warning("egress socket %s shut: %s", self.socket_path, reason)
        self.log.shut = reason
        self._shut.set()
        if self._listener is not None:
            self._listener.close()  # a connect from now on is refused by the kernel
        self._cut()

    def _cut(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for transport in list(self._transports):
            transport.abort()

    async def __aenter__(self) -> EgressProxy:
        self.channel_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        target = self.channel_dir / FORWARDER_NAME
        if not target.exists():
            shutil.copyfile(FORWARDER_SCRIPT, target)
            target.chmod(0o644)
        self.socket_path.unlink(missing_ok=True)
        self._listener = _bind_unix(self.socket_path)
        self._listener.listen(self.max_connections)  # a flood waits in its own connects
        self._listener.setblocking(False)
        self._accepting = asyncio.create_task(self._accept(self._listener))
        self.socket_path.chmod(0o666)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._accepting is not None:
            self._accepting.cancel()  # its pending accept withdrawn before the close
            with contextlib.suppress(BaseException):
                await self._accepting
        if self._listener is not None:
            self._listener.close()
        self._cut()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        self.socket_path.unlink(missing_ok=True)

    async def _accept(self, listener: socket.socket) -> None:
        """Accept one connection at a time, each counted before anything else is done."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE, a closed listener: nothing else to take
                if listener.fileno() < 0:
                    return
                log.warning("egress socket %s: accept failed: %s", self.socket_path, exc)
                await asyncio.sleep(0.1)
                continue
            if not self.guard.admit():  # past the cap: closed unread (the proxy is shut)
                conn.close()
                return
            try:
                await self._start(conn)
            except OSError as exc:
                log.warning("egress socket %s: a connection lost: %s", self.socket_path, exc)

    async def _start(self, conn: socket.socket) -> None:
        """Serve an admitted connection (its place under the cap freed when it ends)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_HEAD_BYTES)
        protocol = _Admitted(self, reader)
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn)
        except BaseException:
            if protocol._transport is None:  # never made: its place is freed here
                self.guard.open -= 1
            conn.close()
            raise
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        task = asyncio.create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._handle(reader, writer)
            await writer.drain()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            writer.transport.abort()
        finally:
            writer.close()  # what was written (an answer, the last bytes) goes out first

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except TimeoutError:
            self.guard.header_timeouts += 1
            late = f"no complete request head within {HEAD_TIMEOUT_S:g} s"
            writer.write(_answer("408 Request Timeout", late))
            return
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError):
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
        try:  # read now: an address the host took since the last attempt counts
            own = host_networks()
        except OSError as exc:
            entry.ip = str(addresses[0]) if addresses else None
            return self._refuse(writer, entry, f"the worker's own addresses are unknown: {exc}")
        refusals = []
        chosen = None
        for ip in addresses:
            why = self.policy.address_refusal(host, port, ip, own)
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

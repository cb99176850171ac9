"""A session's egress proxy: CONNECT and plain HTTP on `egress.sock`, by its policy, logged.

Each attempt is decided by the session's `EgressPolicy` (egress_policy.py) and logged
(`EgressLog`); the socket is bounded like the gateway channel (guard.py).
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
from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from activities.runtimes.network.channel_paths import FORWARDER_NAME, FORWARDER_SCRIPT
from activities.runtimes.network.egress_policy import EgressPolicy, host_networks
from activities.runtimes.network.guard import ChannelLimits, Guard, bind_unix, run_until_shut
from activities.shell_command import ProcessOutcome
from polar.network_policy import normal_host

EGRESS_SOCKET = "egress.sock"
MAX_HEAD_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 10.0
HEAD_TIMEOUT_S = 5.0
"""How long a connection's request head may take from its accept (a client sends its
CONNECT or GET at once): a slow one is answered 408 and closed."""
MAX_LOG_ENTRIES = 10_000
CHUNK = 64 * 1024
log = logging.getLogger("polar.worker")


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

    Its caps are the gateway channel's (`ChannelLimits`, `Guard`), counted at the accept,
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
        self.guard = Guard(limits, self._breach, "egress socket", "POLAR_EGRESS_MAX_CONNECTIONS")
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
        Called by the accept loop (`Guard.admit`), which then ends: no accept is pending on
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
        self._listener = bind_unix(self.socket_path)
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

"""A session's only way out of its sandbox: a Unix socket to the gateway, owned by the worker.

The worker runs one `GatewayRelay` per running session. It serves HTTP and
forwards model API calls to the gateway with the session's own key, whatever
key the caller sent: the channel is the identity. Where the runtime can listen
inside the sandbox's network from the worker (the local runtime's `Loopback`),
the relay serves `SANDBOX_GATEWAY_URL` there itself. In a container (no
network of its own) it serves `channel_dir/gateway.sock` instead, and
`forwarder.py` serves `SANDBOX_GATEWAY_URL` on the container's loopback,
splicing each connection to that socket; `with_forwarder` wraps a command so
it starts first.

The channel is the harness's only door, so the relay bounds what it may hold,
whoever connects (the forwarder, or the sandbox straight to the socket):
at most `ChannelLimits.max_connections` open at once, and each request's
headers within `header_timeout_s` of the connection opening or its last
answer (408 and closed past it; 431 past `max_header_bytes`). A session that
opens more connections than that is ended: the relay stops serving it and
`GatewayRelay.run_guarded` kills its harness, the reason in its log (the caps:
guard.py). A caller that hangs up before its answer hangs up on the gateway too,
which records the call as 499 (never trained), as it does for a direct caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from activities.runtimes.network.channel_paths import (  # the sandbox's side; re-exported
    FORWARDER_NAME,
    FORWARDER_SCRIPT,
    SANDBOX_DIR,  # noqa: F401
    SANDBOX_PORT,
    SOCKET_NAME,
    with_forwarder,  # noqa: F401
)
from activities.runtimes.network.guard import ChannelLimits, Guard, bind_unix, run_until_shut
from activities.runtimes.network.guarded_http import guarded_protocol
from activities.shell_command import ProcessOutcome
from polar.outcomes import GATEWAY_FAULT_HEADER, UNSERVED_STATUS
from polar.providers import APIError, detect

SANDBOX_GATEWAY_URL = f"http://127.0.0.1:{SANDBOX_PORT}"
PLACEHOLDER_KEY = "polar-sealed-channel"
ALLOWED_PREFIXES = ("/v1/", "/v1beta/")
PROBE_PATHS = frozenset({"/", "/v1", "/v1beta"})

SESSION_KEY_HEADER = "x-polar-session-key"
HOP_BY_HOP = frozenset(
    {
        "connection",
        "expect",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
CLIENT_CLOSED = 499  # answered to nobody: the caller hung up before its answer
log = logging.getLogger("polar.worker")


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every relay's client: building one loads the CA bundle, about
    40 ms of CPU that each session paid when its relay started."""
    return ssl.create_default_context()


class _QuietServer(uvicorn.Server):
    """A uvicorn server for one session's channel: it leaves the process's signal handlers
    alone (many run at once), and `stop()` ends it at once. uvicorn's own loop notices
    `should_exit` on a 0.1 s tick, and its shutdown sleeps 0.1 s more and polls for
    connections every 0.1 s: up to 0.3 s of every session's run stage."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._stopping = asyncio.Event()
        self._started = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._started.set()

    async def wait_started(self) -> None:
        """Until the server accepts connections (set by `startup`, no polling)."""
        await self._started.wait()

    def install_signal_handlers(self) -> None:  # uvicorn < 0.29
        pass

    @contextlib.contextmanager
    def capture_signals(self) -> Any:  # uvicorn >= 0.29
        yield

    def stop(self) -> None:
        """End `serve()`: stop accepting, close idle connections, let running calls finish
        (within `timeout_graceful_shutdown`, then cut)."""
        self.should_exit = True
        self._stopping.set()

    async def main_loop(self) -> None:
        await self.on_tick(0)  # the default headers, as uvicorn sets them
        await self._stopping.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()  # an idle keep-alive connection closes now
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.config.timeout_graceful_shutdown or 0)
        while self.server_state.connections and loop.time() < deadline:
            await asyncio.sleep(0.005)  # a call still answering: wait for it, bounded
        for task in list(self.server_state.tasks):
            task.cancel()  # past the grace: cut what still streams
        for server in self.servers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 1)


def _clean_headers(headers: Any, connection: str = "") -> list[tuple[str, str]]:
    """`headers` without hop-by-hop ones (and those `Connection` names)."""
    drop = HOP_BY_HOP | {h.strip().lower() for h in connection.split(",") if h.strip()}
    return [(k, v) for k, v in headers.items() if k.lower() not in drop]


def _allowed(method: str, path: str) -> bool:
    """A model API path (or a client's GET/HEAD probe of the API root), with no dot segments
    a URL parser could fold away."""
    if method in ("GET", "HEAD") and path in PROBE_PATHS:
        return True
    if not path.startswith(ALLOWED_PREFIXES):
        return False
    return not any(part in (".", "..") for part in path.split("/"))


async def _caller_hangs_up(request: Request, sent: asyncio.Event) -> None:
    """Return when the caller disconnects before its answer: once its body is read (`sent`),
    the server's next ASGI message is the disconnect, sent only if the caller goes first."""
    await sent.wait()
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _error(request: Request, status: int, message: str, code: str) -> JSONResponse:
    """An error in the caller's provider shape (as the gateway itself would render it)."""
    status, body = detect(request.url.path, request.headers).render_error(
        APIError(status, message, code=code)
    )
    return JSONResponse(body, status_code=status)


class GatewayRelay:
    """Host side of one session's channel: HTTP on `listener` (a socket the runtime opened in
    the sandbox's network) or else on `channel_dir/gateway.sock` (for the in-sandbox
    forwarder), forwarded to the gateway."""

    def __init__(
        self,
        channel_dir: Path,
        gateway_url: str,
        session_key: str,
        listener: socket.socket | None = None,
        limits: ChannelLimits | None = None,
    ) -> None:
        self.channel_dir = Path(channel_dir)
        self.gateway_url = gateway_url.rstrip("/")
        self.session_key = session_key
        self.listener = listener
        self.limits = limits or ChannelLimits()
        self._client: httpx.AsyncClient | None = None
        self._server: _QuietServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._breached = asyncio.Event()
        self.guard = Guard(self.limits, self._breach)
        self.forwarded = 0
        """Requests sent on to the gateway so far (any path the channel serves)."""
        self.unserved = 0
        """Of those, the ones not served: answered 5xx by the gateway (an upstream error or
        timeout, no replica reachable, a completion it could not record) or never answered
        (the gateway unreachable). What makes a failed harness an infra error
        (polar/outcomes.py: inference_backend)."""
        self.unserved_by_gateway = 0
        """Of those, the ones the gateway itself failed: unreachable, or answered a 5xx for
        its own fault (`x-polar-gateway-fault`: a completion it could not record)."""

    @property
    def breach(self) -> str | None:
        """Why this session's channel was shut (it passed a cap); None while it serves."""
        return self.guard.breach

    def _breach(self, reason: str) -> None:
        """Stop serving at once: no new connection, and the open ones cut."""
        log.warning("gateway channel %s shut: %s", self.socket_path, reason)
        self._breached.set()
        if self._server is not None:
            for server in self._server.servers:
                server.close()
            for connection in list(self._server.server_state.connections):
                connection.transport.abort()

    async def run_guarded(self, run: Awaitable[ProcessOutcome], stderr: Path) -> ProcessOutcome:
        """`run` (the harness), ended if its channel is shut first (`run_until_shut`)."""
        return await run_until_shut(
            run, self._breached, lambda: f"the gateway channel was shut: {self.breach}", stderr
        )

    @property
    def socket_path(self) -> Path:
        return self.channel_dir / SOCKET_NAME

    async def __aenter__(self) -> GatewayRelay:
        path = self.socket_path
        if self.listener is None:  # for the in-sandbox forwarder: its script and socket
            self.channel_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
            self.channel_dir.chmod(0o755)
            target = self.channel_dir / FORWARDER_NAME
            shutil.copyfile(FORWARDER_SCRIPT, target)
            target.chmod(0o644)
            path.unlink(missing_ok=True)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=10.0, read=None, write=None, pool=None),
            verify=_tls_context(),
        )
        sock = self.listener if self.listener is not None else bind_unix(path)
        config = uvicorn.Config(
            self._app,
            http=guarded_protocol(self.guard),
            interface="asgi3",
            ws="none",
            lifespan="off",
            proxy_headers=False,
            server_header=False,  # the gateway's own server and date headers pass through
            date_header=False,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
            # the kernel's accept queue no deeper than the cap: a flood waits on its SYNs
            # (the queue full) instead of queueing thousands past the relay's count
            backlog=self.limits.max_connections,
        )
        self._server = _QuietServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=f"relay {path}")
        started = asyncio.ensure_future(self._server.wait_started())
        await asyncio.wait({self._task, started}, return_when=asyncio.FIRST_COMPLETED)
        if not started.done():  # serve() ended first
            started.cancel()
            await self._close_client()
            self._task.result()  # raises what stopped it
            where = path if self.listener is None else self.listener.getsockname()
            raise RuntimeError(f"gateway relay on {where} stopped while starting")
        if self.listener is None:
            path.chmod(0o666)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None and self._task is not None:
            self._server.stop()
            done, _ = await asyncio.wait({self._task}, timeout=3)
            if not done:  # a call still streaming: cut it
                self._server.force_exit = True
                self._task.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._task
        await self._close_client()
        if self.listener is None:
            self.socket_path.unlink(missing_ok=True)

    async def _close_client(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        response = await self._forward(request)
        await response(scope, receive, send)

    async def _forward(self, request: Request) -> Response:
        path = request.url.path
        if not _allowed(request.method, path):
            return _error(request, 404, f"{path} is not served on this channel", "not_found")
        assert self._client is not None
        self.forwarded += 1
        headers = _clean_headers(request.headers, request.headers.get("connection", ""))
        headers = [(k, v) for k, v in headers if k.lower() != SESSION_KEY_HEADER]
        headers.append((SESSION_KEY_HEADER, self.session_key))
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        raw_path = (request.scope.get("raw_path") or path.encode()).decode("latin-1")
        query = request.scope.get("query_string", b"").decode("latin-1")
        url = self.gateway_url + raw_path + (f"?{query}" if query else "")
        sent = asyncio.Event()

        async def upload() -> AsyncIterator[bytes]:
            async for chunk in request.stream():
                yield chunk
            sent.set()

        if not has_body:
            sent.set()
        upstream = self._client.build_request(
            request.method, url, headers=headers, content=upload() if has_body else None
        )
        sending = asyncio.ensure_future(self._client.send(upstream, stream=True))
        hung_up = asyncio.ensure_future(_caller_hangs_up(request, sent))
        try:
            await asyncio.wait({sending, hung_up}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            sending.cancel()
            raise
        finally:
            hung_up.cancel()
        if (hung_up.done() and not hung_up.cancelled()) and not sending.done():
            # the caller left before its answer: so does the relay, and the gateway sees the
            # disconnect (its call is recorded 499 and never trained)
            sending.cancel()
            with contextlib.suppress(BaseException):
                await sending
            return Response(status_code=CLIENT_CLOSED)
        try:
            answer = sending.result()
        except ClientDisconnect:
            return Response(status_code=CLIENT_CLOSED)
        except httpx.TransportError as exc:
            self.unserved += 1
            self.unserved_by_gateway += 1
            message = f"the gateway is unreachable: {type(exc).__name__}: {exc}"
            return _error(request, 502, message, "gateway_unreachable")
        if answer.status_code >= UNSERVED_STATUS:
            self.unserved += 1
            if GATEWAY_FAULT_HEADER in answer.headers:
                self.unserved_by_gateway += 1

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:
                await answer.aclose()

        return StreamingResponse(
            body(),
            status_code=answer.status_code,
            headers=dict(_clean_headers(answer.headers, answer.headers.get("connection", ""))),
        )

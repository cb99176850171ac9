"""uvicorn's HTTP protocol under a door's `Guard` (guard.py): the gateway relay's
connections, counted at the accept, with their headers' time and size capped."""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from activities.runtimes.network.guard import Guard

TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-length: 0\r\nconnection: close\r\n\r\n"
)


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's HTTP protocol under the relay's caps (`Guard`): a connection past the cap is
    dropped at once, and headers that do not arrive in time (or grow too big) get a 408
    (431) and the connection closed. `guard` is set per relay (`guarded_protocol`)."""

    guard: Guard
    _admitted = False
    _header_timer: asyncio.TimerHandle | None = None
    _header_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if not self.guard.admit():
            transport.abort()
            return
        self._admitted = True
        super().connection_made(transport)
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._admitted:
            return
        self._admitted = False
        self.guard.open -= 1
        self._headers_done()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._header_timer is not None:
            self._header_bytes += len(data)
        super().data_received(data)
        over = self._header_bytes > self.guard.limits.max_header_bytes
        if self._header_timer is not None and over:
            self._refuse(TOO_LARGE)

    def on_headers_complete(self) -> None:
        self._headers_done()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # its headers are in already
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._await_headers()

    def _await_headers(self) -> None:
        self._headers_done()
        self._header_bytes = 0
        self._header_timer = self.loop.call_later(
            self.guard.limits.header_timeout_s, self._headers_late
        )

    def _headers_done(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        self.guard.header_timeouts += 1
        self._refuse(TIMED_OUT)

    def _refuse(self, answer: bytes) -> None:
        self._headers_done()
        if not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()


def guarded_protocol(guard: Guard) -> type[asyncio.Protocol]:
    return type("GuardedHttp", (GuardedHttp,), {"guard": guard})

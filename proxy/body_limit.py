"""Refuse oversized request bodies while they are read, never buffering one without bound.

`BodyLimit` is a pure ASGI middleware around the gateway app:

* a declared `Content-Length` over the limit is answered 413 at once, before
  any of the body is read;
* a body without one (chunked transfer encoding) is counted as it arrives: the
  chunk that crosses the limit raises `BodyTooLarge`, a 413 `APIError`, from
  inside `request.body()`, so at most `max_bytes` plus one chunk is ever held.

Either way the 413 is rendered in the caller's own error shape (OpenAI,
Anthropic or Google, by path and headers), like every other gateway error.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from polar.providers import APIError
from proxy.errors import error_response

MiB = 1024 * 1024


class BodyTooLarge(APIError):
    """A request body over the gateway's `max_body_bytes`."""

    def __init__(self, limit: int, seen: int | None = None) -> None:
        size = f"{seen} bytes" if seen is not None else f"more than {limit} bytes"
        super().__init__(
            413,
            f"Your request body is {size}; this gateway accepts at most {limit} bytes "
            "(POLAR_MAX_BODY_BYTES).",
            type="invalid_request_error",
            code="request_too_large",
        )


def declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, if it declares a usable one."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimit:
    """ASGI middleware: 413 (in the caller's shape) for bodies over `max_bytes`; 0 turns it off."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.max_bytes <= 0:
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        length = declared_length(scope)
        if length is not None and length > limit:
            response = error_response(Request(scope), BodyTooLarge(limit, length))
            response.headers["connection"] = "close"  # the unread body is not drained
            await response(scope, receive, send)
            return
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, limited_receive, send)

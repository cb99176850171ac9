"""A call's answer rendered in its caller's shape: JSON (orjson), or the synthetic stream its
SDK expects; a failure to render put where it belongs (the caller's request, or the gateway)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse

from polar import fastjson
from polar.providers import APIError, CallContext, ProviderAPI
from polar.providers.base import bad_request

log = logging.getLogger("polar.gateway")

__all__ = ["STREAM_HEADERS", "FastJSONResponse", "render_answer"]

STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class FastJSONResponse(JSONResponse):
    """A JSON response rendered by orjson (`polar.fastjson`)."""

    def render(self, content: Any) -> bytes:
        return fastjson.dumps(content)


def _stream(events: list[str], media_type: str) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        for event in events:
            yield event

    return StreamingResponse(body(), media_type=media_type, headers=STREAM_HEADERS)


def _rendered(
    provider: ProviderAPI, reply: dict[str, Any], body: dict[str, Any], call: CallContext
) -> Response:
    """The caller's answer, whole or as its synthetic stream, serialised."""
    if provider.wants_stream(body, call):
        events: Iterator[str] = provider.stream_events(reply, body, call)
        return _stream(list(events), provider.stream_media_type(call))
    return FastJSONResponse(provider.from_chat(reply, body, call))


def render_answer(
    provider: ProviderAPI, reply: dict[str, Any], body: dict[str, Any], call: CallContext
) -> Response:
    """`_rendered`, with a failure put where it belongs: when the same answer renders for an
    empty request, a field of the caller's request could not take it, and the caller gets
    a 400 in its shape; otherwise the error stands (the answer itself, a gateway fault)."""
    try:
        return _rendered(provider, reply, body, call)
    except APIError:
        raise
    except Exception as exc:
        try:
            neutral = {"stream": True} if provider.wants_stream(body, call) else {}
            _rendered(provider, reply, neutral, call)
        except Exception:  # noqa: BLE001 - the original error is the one to raise
            raise exc from None
        log.warning("the answer does not render for this request: %r", exc, exc_info=True)
        raise bad_request(
            f"malformed request: a field has an unexpected type or shape ({exc})",
            code="invalid_request",
        ) from exc

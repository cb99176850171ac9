"""The gateway's FastAPI app: OpenAI Chat Completions in front of vLLM / SGLang.

One call: resolve the session from its key, normalise the request (training
fields, non-streaming), call upstream, write the CompletionRecord to S3, and
only then answer: JSON, or a synthetic SSE stream if the caller asked to
stream. Failed upstream calls are recorded too. Every path also answers
without its `/v1` prefix, for harnesses whose base URL lacks it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from polar.session_keys import SessionIdentity
from polar.settings import Settings
from polar.storage import Storage
from proxy.auth import authenticate
from proxy.errors import OpenAIError, install_error_handlers
from proxy.recorder import Recorder
from proxy.streaming import render_chat_stream
from proxy.upstream import UpstreamClient, UpstreamError, strip_training_fields

DEFAULT_MODEL = "policy"


async def read_chat_request(request: Request) -> dict[str, Any]:
    """The JSON body of a Chat Completions call; 400 in OpenAI's shape if unusable."""
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise OpenAIError(
            400, f"We could not parse the JSON body of your request: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise OpenAIError(400, "the request body must be a JSON object", code="invalid_json")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        missing = "messages" not in body
        raise OpenAIError(
            400,
            "Missing required parameter: 'messages'." if missing
            else "'messages' must be a non-empty array.",
            param="messages",
            code="missing_required_parameter" if missing else "invalid_type",
        )
    return body


def _model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "polar"}


def create_app(settings: Settings, storage: Storage | None = None) -> FastAPI:
    """The gateway app for `settings`; records go to `storage` (default: S3 from settings)."""
    upstream = UpstreamClient(settings)
    recorder = Recorder(storage or Storage(settings))
    model_name = settings.upstream_model or DEFAULT_MODEL

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await upstream.aclose()

    app = FastAPI(title="Polar gateway", lifespan=lifespan)
    app.state.settings = settings
    app.state.upstream = upstream
    app.state.recorder = recorder
    install_error_handlers(app)
    router = APIRouter()

    @router.post("/chat/completions", response_model=None)
    async def chat_completions(
        request: Request, identity: Annotated[SessionIdentity, Depends(authenticate)]
    ) -> Response:
        body = await read_chat_request(request)
        call = recorder.start(identity, body, provider="openai_chat")
        normalized = upstream.normalize(body)
        try:
            answer = await upstream.complete(normalized)
        except UpstreamError as exc:
            await recorder.record(
                call, normalized, response=exc.upstream_body,
                status_code=exc.status_code, error=exc.message,
            )
            raise
        await recorder.record(
            call, normalized, response=answer.body,
            extracted=upstream.extract(answer.body), status_code=answer.status_code,
        )
        reply = strip_training_fields(answer.body, body)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = render_chat_stream(reply, include_usage)

            async def stream() -> AsyncIterator[str]:
                for event in events:
                    yield event

            return StreamingResponse(
                stream(),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        return JSONResponse(reply)

    @router.get("/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(model_name)]}

    @router.get("/models/{model:path}")
    async def get_model(model: str) -> dict[str, Any]:
        return _model_card(model)

    app.include_router(router, prefix="/v1")
    app.include_router(router)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "gateway_id": recorder.gateway_id,
            "upstream_kind": upstream.kind,
            "upstreams": upstream.urls,
            "time": time.time(),
        }

    return app

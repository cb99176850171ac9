"""The model-call routes' fast path: the gateway's hot requests skip FastAPI's routing.

Every recorded model call is a POST to one of a few fixed paths
(`CALL_ROUTES`, each with and without `/v1`). `CallRoutes`, a pure ASGI
middleware inside the gateway app (after `BodyLimit`), serves those straight
from `Gateway.serve`: the session from its key, the call, and errors in the
caller's shape, exactly as the FastAPI routes do, without the router's walk
over every route, dependency solving, and the exception and exit-stack
layers around each endpoint (about a sixth of the gateway's CPU per call;
`bench/bench_gateway.py`). Everything else (probes, model listings,
token counts, Google's `/models/{model}:{method}`) goes on to the app, whose
routes, including these, also make the OpenAPI schema.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from polar.providers import APIError, ProviderAPI, get_provider
from polar.session_keys import SessionIdentity
from proxy.auth import resolve_session
from proxy.errors import error_response, unexpected_error_response

CALL_ROUTES: dict[str, str] = {
    "/chat/completions": "openai_chat",
    "/responses": "openai_responses",
    "/messages": "anthropic_messages",
}
"""Path (under each of `CALL_PREFIXES`) → the provider API of the recorded calls posted there."""
CALL_PREFIXES = ("/v1", "")

Serve = Callable[[ProviderAPI, Request, SessionIdentity], Awaitable[Response]]


def call_providers() -> dict[str, ProviderAPI]:
    """Every full call path (prefix + route) → its provider API."""
    return {
        prefix + path: get_provider(name)
        for path, name in CALL_ROUTES.items()
        for prefix in CALL_PREFIXES
    }


class CallRoutes:
    """ASGI middleware: POSTs to the call routes go to `serve`; the rest to `app`."""

    def __init__(self, app: ASGIApp, serve: Serve, secret: str | None) -> None:
        self.app = app
        self.serve = serve
        self.secret = secret
        self.routes: Mapping[str, ProviderAPI] = call_providers()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        provider = None
        if scope["type"] == "http" and scope["method"] == "POST":
            provider = self.routes.get(scope["path"])
        if provider is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            identity = resolve_session(request.headers, self.secret, request.query_params)
            response = await self.serve(provider, request, identity)
        except APIError as exc:
            response = error_response(request, exc)
        except Exception as exc:  # noqa: BLE001 - answered in the caller's shape, logged
            response = unexpected_error_response(request, exc)
        await response(scope, receive, send)

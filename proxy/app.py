"""The gateway's FastAPI app: every provider API a harness speaks, in front of vLLM / SGLang.

One model call (`proxy.gateway`): resolve the session from its key, normalise
the request to Chat Completions with its provider API (`polar.providers`), add
the training fields, call upstream without streaming, write the CompletionRecord
to S3, and only then answer in the caller's own shape: JSON, or the synthetic
stream its SDK expects. Failed upstream calls are recorded too; every error
goes back in the caller's error shape (`proxy.errors`).

Routes (each also without its `/v1` prefix, for harnesses whose base URL lacks it):
    POST /v1/chat/completions                   OpenAI Chat Completions
    POST /v1/responses, /v1/responses/input_tokens       OpenAI Responses
    POST /v1/messages, /v1/messages/count_tokens         Anthropic Messages
    POST /v1beta/models/{model}:generateContent | :streamGenerateContent | :countTokens
    GET  /v1/models[/{id}], /v1beta/models[/{id}]        in the caller's shape
    HEAD|GET /, /v1, /v1beta                              probes

Nothing else answers on the model port. Admin, metrics, health and the docs
are on the gateway's own admin listener (`POLAR_ADMIN_PORT`, `proxy.admin`),
served from `app.state.admin_app` beside this app by `proxy.server`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from polar.providers import APIError, CallContext, ProviderAPI, get_provider
from polar.providers.google_generate import split_action
from polar.session_keys import SessionIdentity
from polar.settings import GatewaySettings
from polar.storage import Storage
from proxy.admin import create_admin_app
from proxy.auth import authenticate
from proxy.body_limit import BodyLimit
from proxy.call_routes import CALL_PREFIXES, CALL_ROUTES, CallRoutes
from proxy.errors import install_error_handlers, provider_for
from proxy.gateway import Gateway
from proxy.openapi import install_openapi
from proxy.tokens import TokenCounter, chat_template_counter

__all__ = ["call_context", "create_app"]


async def _identity(request: Request) -> SessionIdentity:
    """`authenticate` on the event loop: FastAPI runs a sync dependency in its thread pool,
    a thread hop per call that costs more CPU than the HMAC check itself."""
    return authenticate(request)


Identity = Annotated[SessionIdentity, Depends(_identity)]


def call_context(
    request: Request, model: str | None = None, action: str | None = None
) -> CallContext:
    return CallContext(
        path=request.url.path,
        headers=request.headers,
        query=request.query_params,
        model=model,
        action=action,
    )


def _api_routes(gw: Gateway) -> APIRouter:
    """OpenAI and Anthropic routes, served under `/v1` and at the root. The recorded calls
    (`CALL_ROUTES`) are answered by `CallRoutes` before the router; their routes here make
    the OpenAPI schema and serve the same way should a call reach the router."""
    router = APIRouter()

    def call_route(path: str, provider: ProviderAPI) -> None:
        async def call(request: Request, identity: Identity) -> Response:
            return await gw.serve(provider, request, identity, call_context(request))

        call.__name__ = f"{provider.name}_call"
        router.add_api_route(path, call, methods=["POST"], response_model=None)

    for path, name in CALL_ROUTES.items():
        call_route(path, get_provider(name))
    responses, messages = get_provider("openai_responses"), get_provider("anthropic_messages")

    @router.post("/responses/input_tokens")
    async def response_tokens(request: Request, _: Identity) -> dict[str, Any]:
        return await gw.count(responses, request, call_context(request))

    @router.post("/messages/count_tokens")
    async def message_tokens(request: Request, _: Identity) -> dict[str, Any]:
        return await gw.count(messages, request, call_context(request))

    return router


def _model_routes(gw: Gateway) -> APIRouter:
    """Google's generate routes and the model listings, under `/v1beta`, `/v1` and the root."""
    router = APIRouter()
    google = get_provider("google_generate")

    @router.post("/models/{target:path}", response_model=None)
    async def generate(target: str, request: Request, identity: Identity) -> Response:
        model, action = split_action(target)
        call = call_context(request, model, action)
        if action is None:
            raise APIError(404, f"unknown method on models/{target}", code="not_found")
        if action == "countTokens":
            return JSONResponse(await gw.count(google, request, call))
        return await gw.serve(google, request, identity, call)

    @router.get("/models")
    async def list_models(request: Request) -> dict[str, Any]:
        return provider_for(request).model_list([gw.model_name], gw.upstream.context_window)

    @router.get("/models/{model:path}")
    async def get_model(model: str, request: Request) -> dict[str, Any]:
        return provider_for(request).model_card(model, gw.upstream.context_window)

    return router


def create_app(
    settings: GatewaySettings,
    storage: Storage | None = None,
    *,
    token_counter: TokenCounter | None = None,
) -> FastAPI:
    """The gateway app for `settings`; records go to `storage` (default: S3 from settings).

    `token_counter` counts prompt tokens for the token-counting side calls; by
    default the chat template of `settings.model_dir` if set, else approximate.
    """
    if token_counter is None and settings.model_dir is not None:
        token_counter = chat_template_counter(settings.model_dir)
    gw = Gateway(settings, storage, token_counter)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for client in gw.clients:
            client.start()
        yield
        for client in gw.clients:
            await client.aclose()

    # the model port: provider APIs and their probes only (no docs, schema, admin or metrics)
    app = FastAPI(
        title="Polar gateway", lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None
    )
    app.state.settings = settings
    app.state.upstream = gw.upstream
    app.state.recorder = gw.recorder
    app.state.gateway = gw
    install_error_handlers(app)

    async def serve_call(
        provider: ProviderAPI, request: Request, identity: SessionIdentity
    ) -> Response:
        return await gw.serve(provider, request, identity, call_context(request))

    # added first, so inside BodyLimit: oversized bodies are refused on the fast path too
    app.add_middleware(CallRoutes, serve=serve_call, secret=settings.session_secret)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    api, models = _api_routes(gw), _model_routes(gw)
    for prefix in CALL_PREFIXES:
        app.include_router(api, prefix=prefix)
    for prefix in ("/v1beta", "/v1", ""):
        app.include_router(models, prefix=prefix)
    app.state.metrics = gw.metrics
    app.state.admission = gw.admission

    @app.api_route("/", methods=["GET", "HEAD"])
    @app.api_route("/v1", methods=["GET", "HEAD"])
    @app.api_route("/v1beta", methods=["GET", "HEAD"])
    async def probe() -> dict[str, str]:
        return {"status": "ok", "service": "polar-gateway"}

    install_openapi(app)
    app.state.admin_app = create_admin_app(
        settings, gw.admission, gw.metrics.registry, gw.health, model_schema=app.openapi
    )
    return app

"""The gateway's FastAPI app: every provider API a harness speaks, in front of vLLM / SGLang.

One model call: resolve the session from its key, normalise the request to
Chat Completions with its provider API (`polar.providers`), add the training
fields, call upstream without streaming, write the CompletionRecord to S3,
and only then answer in the caller's own shape: JSON, or the synthetic
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

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from polar import fastjson
from polar.logs import log_context
from polar.outcomes import UNSERVED_STATUS
from polar.providers import APIError, CallContext, ProviderAPI, get_provider
from polar.providers.base import bad_request, dict_at
from polar.providers.google_generate import split_action
from polar.session_keys import SessionIdentity
from polar.settings import Settings
from polar.storage import Storage
from proxy.admin import Admission, create_admin_app
from proxy.auth import authenticate
from proxy.body_limit import BodyLimit
from proxy.call_routes import CALL_PREFIXES, CALL_ROUTES, CallRoutes
from proxy.errors import install_error_handlers, provider_for
from proxy.metrics import GatewayMetrics
from proxy.on_policy import check_on_policy
from proxy.openapi import install_openapi
from proxy.pools import PoolSpec, parse_pools, pool_for
from proxy.quota import RecordLimits
from proxy.recorder import PendingCall, Recorder
from proxy.request_json import parse_body
from proxy.routing import route_key
from proxy.session_gate import SessionGate
from proxy.tokens import TokenCounter, chat_template_counter, count_tokens
from proxy.upstream import Extracted, UpstreamClient, UpstreamError, strip_training_fields

log = logging.getLogger("polar.gateway")
DEFAULT_MODEL = "policy"
CLIENT_CLOSED = 499  # the status a call gets when its caller hung up before the answer
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def _identity(request: Request) -> SessionIdentity:
    """`authenticate` on the event loop: FastAPI runs a sync dependency in its thread pool,
    a thread hop per call that costs more CPU than the HMAC check itself."""
    return authenticate(request)


Identity = Annotated[SessionIdentity, Depends(_identity)]


async def read_json(request: Request) -> dict[str, Any]:
    """The JSON object body of a call; 400 (in the caller's shape) if unusable: invalid,
    nested too deep, a lone surrogate, not an object (`proxy.request_json`)."""
    return parse_body(await request.body())


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


async def _caller_hangs_up(request: Request) -> None:
    """Return when the caller disconnects (its body has been read: the next ASGI message is
    the disconnect, which the server sends only if the caller goes before its answer)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class FastJSONResponse(JSONResponse):
    """A JSON response rendered by orjson (`polar.fastjson`)."""

    def render(self, content: Any) -> bytes:
        return fastjson.dumps(content)


async def _record(recorder: Recorder | None, pending: PendingCall, *args: Any, **kw: Any) -> None:
    """Record a call, unless its pool's calls are not recorded (`recorder` None)."""
    if recorder is not None:
        await recorder.record(pending, *args, **kw)


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


def _render(
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


class Gateway:
    """The per-app services a model call goes through: upstream, recorder, token counter."""

    def __init__(
        self, settings: Settings, storage: Storage | None, counter: TokenCounter | None
    ) -> None:
        self.upstream = UpstreamClient(settings)
        self.pools = parse_pools(settings.pools)
        self.pool_clients = {p.name: UpstreamClient(settings, p) for p in self.pools}
        store = storage or Storage(settings)
        limits = RecordLimits(store, settings.max_record_bytes, settings.max_session_bytes)
        self.recorder = Recorder(store, limits=limits)
        self.off_policy = settings.off_policy
        self.counter = counter
        self.model_name = settings.upstream_model or DEFAULT_MODEL
        self.metrics = GatewayMetrics(settings.metrics_max_sessions)
        self.admission = Admission(settings.pause_hold_s, self.metrics)
        self.max_choices = settings.max_choices
        self.sessions = SessionGate(self.recorder.storage, settings.closed_check_s)

    @property
    def clients(self) -> list[UpstreamClient]:
        """The policy's upstream client and each named pool's."""
        return [self.upstream, *self.pool_clients.values()]

    async def serve(
        self, provider: ProviderAPI, request: Request, identity: SessionIdentity, call: CallContext
    ) -> Response:
        """One recorded model call, held while paused, counted, answered in `provider`'s shape."""
        started, status, code = time.monotonic(), 500, None
        with log_context(session_id=identity.session_id, task_id=identity.task_id):
            try:
                async with self.admission.admit():
                    response = await self._serve(provider, request, identity, call)
                status = response.status_code
                return response
            except APIError as exc:
                status, code = exc.status_code, exc.code
                if isinstance(exc, UpstreamError):
                    self.metrics.upstream_errors.labels(provider.name, exc.code or status).inc()
                if exc.code == "recording_failed":
                    self.metrics.recording_failures.inc()
                raise
            finally:
                elapsed = time.monotonic() - started
                self.metrics.calls.labels(provider.name, str(status)).inc()
                if status >= UNSERVED_STATUS:  # per session: an infra fault, not the policy's
                    self.metrics.sessions.add(identity.session_id, identity.task_id, 0, 0, 1)
                self.metrics.latency.labels(provider.name).observe(elapsed)
                log.info(
                    "model call %s %s",
                    provider.name,
                    status,
                    extra={
                        "provider": provider.name,
                        "status": status,
                        "error_code": code,
                        "latency_ms": round(elapsed * 1000, 1),
                    },
                )

    def _count_tokens(
        self, provider: str, identity: SessionIdentity, body: dict[str, Any], ex: Extracted
    ) -> None:
        usage = dict_at(body, "usage")
        prompt = len(ex.prompt_token_ids or []) or int(usage.get("prompt_tokens") or 0)
        completion = ex.sampled_tokens or int(usage.get("completion_tokens") or 0)
        self.metrics.tokens(provider, identity.session_id, identity.task_id, prompt, completion)

    def _check_known_model(self, model: Any, only_model: str) -> None:
        """A task that refuses unknown models (`harness.unknown_models: refuse`): a model no
        pool serves and that is neither the session's policy name nor the gateway's own is
        answered 404 `model_not_found` in the caller's shape, never quietly the policy."""
        if model in (only_model, self.model_name):
            return
        raise APIError(
            404,
            f"the model {model!r} does not exist here: this session may use {only_model!r} "
            "(its task refuses unknown models)",
            type="invalid_request_error",
            param="model",
            code="model_not_found",
        )

    @staticmethod
    def _check_pool_access(pool: PoolSpec, identity: SessionIdentity, model: Any) -> None:
        """A pool that is not open to harnesses (the judge's, any non-policy pool by default)
        answers only the worker's own keys: a harness's call is a 404 `model_not_found` in
        its shape, as the real API answers a model the key cannot use, never served."""
        if pool.may_serve(identity.attempt):
            return
        raise APIError(
            404,
            f"The model {model!r} does not exist or you do not have access to it "
            "(a harness's key reaches only its session's policy models).",
            type="invalid_request_error",
            param="model",
            code="model_not_found",
        )

    def _check_choices(self, chat: dict[str, Any], provider: ProviderAPI) -> None:
        """Every sampled choice becomes training data, so a call may ask for at most
        `max_choices` of them (400 in the caller's shape past it)."""
        n = chat.get("n", 1)
        if n is None:
            return
        param = "candidateCount" if provider.name == "google_generate" else "n"
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self.max_choices:
            raise APIError(
                400,
                f"{param}={n!r}: this gateway samples between 1 and {self.max_choices} "
                "choices per call (POLAR_MAX_CHOICES); each one is recorded and trained",
                param=param,
                code="invalid_value",
            )

    async def _serve(
        self, provider: ProviderAPI, request: Request, identity: SessionIdentity, call: CallContext
    ) -> Response:
        await self.sessions.check(identity)  # a closed session's key records nothing
        body = await read_json(request)
        pending = self.recorder.start(identity, body, provider=provider.name)
        chat = provider.to_chat(body, call)
        self._check_choices(chat, provider)
        pool = pool_for(self.pools, chat.get("model"))  # None: the policy's own backends
        if pool is not None:
            self._check_pool_access(pool, identity, chat.get("model"))
        elif identity.only_model is not None:
            self._check_known_model(chat.get("model"), identity.only_model)
        client = self.upstream if pool is None else self.pool_clients[pool.name]
        if pool is None or pool.policy:
            untrainable = check_on_policy(chat, self.off_policy)  # 400 under `refuse`
        else:
            untrainable = pool.untrainable
        recorder = self.recorder if pool is None or pool.record else None
        if recorder is not None:
            await recorder.limits.check_room(identity.session_id)  # 403 once at its quota
        normalized = client.normalize(chat, identity)
        key = route_key(identity.session_id, chat.get("messages"))
        upstream = asyncio.ensure_future(client.complete(normalized, key))
        hung_up = asyncio.ensure_future(_caller_hangs_up(request))
        try:
            await asyncio.wait({upstream, hung_up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hung_up.cancel()
        gone = hung_up.done() and not hung_up.cancelled()
        if gone and not upstream.done():  # nobody will read it: stop the sampling
            upstream.cancel()
            with contextlib.suppress(BaseException):
                await upstream
            await _record(
                recorder,
                pending,
                normalized,
                response=None,
                status_code=CLIENT_CLOSED,
                error="the client disconnected before the answer",
                client_disconnected=True,
                untrainable=untrainable,
            )
            self.metrics.client_disconnects.inc()
            return Response(status_code=CLIENT_CLOSED)
        try:
            answer = upstream.result()
        except UpstreamError as exc:
            await _record(
                recorder,
                pending,
                normalized,
                response=exc.upstream_body,
                status_code=exc.status_code,
                error=exc.message,
                client_disconnected=gone,
                untrainable=untrainable,
            )
            raise
        extracted = client.extract(answer.body)
        try:  # rendered before it is recorded: an answer is recorded as answered only if it is
            response = _render(provider, strip_training_fields(answer.body, chat), body, call)
        except Exception as exc:
            await _record(
                recorder,
                pending,
                normalized,
                response=answer.body,
                extracted=extracted,
                status_code=exc.status_code if isinstance(exc, APIError) else 500,
                error=f"the answer could not be rendered for the caller: {exc}",
                client_disconnected=gone,
                untrainable=untrainable,
            )
            raise
        await _record(
            recorder,
            pending,
            normalized,
            response=answer.body,
            extracted=extracted,
            status_code=answer.status_code,
            client_disconnected=gone,
            untrainable=untrainable,
        )
        if gone:
            self.metrics.client_disconnects.inc()
        self._count_tokens(provider.name, identity, answer.body, extracted)
        return response

    async def count(
        self, provider: ProviderAPI, request: Request, call: CallContext
    ) -> dict[str, Any]:
        """A token-counting side call: the prompt of the normalised request, counted."""
        chat = provider.to_chat(await read_json(request), call)
        n, approximate = await asyncio.to_thread(count_tokens, chat, self.counter)
        return provider.token_count(n, approximate)


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
    settings: Settings, storage: Storage | None = None, *, token_counter: TokenCounter | None = None
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

    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "gateway_id": gw.recorder.gateway_id,
            "upstream_kind": gw.upstream.kind,
            "upstreams": gw.upstream.urls,
            "upstream_routing": gw.upstream.router.mode,
            "replicas": gw.upstream.router.snapshot(),
            "context_window": gw.upstream.context_window,
            "pools": {
                p.name: {
                    "models": list(p.models),
                    "record": p.record,
                    "policy": p.policy,
                    "harness": p.harness_may_call,
                    "replicas": gw.pool_clients[p.name].router.snapshot(),
                }
                for p in gw.pools
            },
            "time": time.time(),
        }

    install_openapi(app)
    app.state.admin_app = create_admin_app(
        settings, gw.admission, gw.metrics.registry, health, model_schema=app.openapi
    )
    return app

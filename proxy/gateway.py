"""The gateway's per-app services (`Gateway`) and one recorded model call, step by step:
the session checked, the request normalised and routed, the upstream called (raced against
the caller hanging up), the answer rendered, recorded, then returned."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from polar.logs import log_context
from polar.outcomes import UNSERVED_STATUS
from polar.providers import APIError, CallContext, ProviderAPI
from polar.providers.base import dict_at
from polar.session_keys import SessionIdentity
from polar.settings import GatewaySettings
from polar.storage import Storage
from proxy.admin import Admission
from proxy.metrics import GatewayMetrics
from proxy.on_policy import check_on_policy
from proxy.pools import PoolSpec, parse_pools, pool_for
from proxy.quota import RecordLimits
from proxy.recorder import PendingCall, Recorder
from proxy.rendering import render_answer
from proxy.request_json import parse_body
from proxy.routing import route_key
from proxy.session_gate import SessionGate
from proxy.tokens import TokenCounter, count_tokens
from proxy.training_fields import Extracted, strip_training_fields
from proxy.upstream import UpstreamClient
from proxy.upstream_answers import UpstreamAnswer, UpstreamError

log = logging.getLogger("polar.gateway")

__all__ = ["CLIENT_CLOSED", "DEFAULT_MODEL", "Gateway", "read_json"]

DEFAULT_MODEL = "policy"

CLIENT_CLOSED = 499  # the status a call gets when its caller hung up before the answer


async def read_json(request: Request) -> dict[str, Any]:
    """The JSON object body of a call; 400 (in the caller's shape) if unusable: invalid,
    nested too deep, a lone surrogate, not an object (`proxy.request_json`)."""
    return parse_body(await request.body())


async def _caller_hangs_up(request: Request) -> None:
    """Return when the caller disconnects (its body has been read: the next ASGI message is
    the disconnect, which the server sends only if the caller goes before its answer)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _record(recorder: Recorder | None, pending: PendingCall, *args: Any, **kw: Any) -> None:
    """Record a call, unless its pool's calls are not recorded (`recorder` None)."""
    if recorder is not None:
        await recorder.record(pending, *args, **kw)


class Gateway:
    """The per-app services a model call goes through: upstream, recorder, token counter."""

    def __init__(
        self, settings: GatewaySettings, storage: Storage | None, counter: TokenCounter | None
    ) -> None:
        store = storage or Storage(settings)
        self.upstream = UpstreamClient(settings, storage=store)  # placements shared in S3
        self.pools = parse_pools(settings.pools)
        self.pool_clients = {p.name: UpstreamClient(settings, p) for p in self.pools}
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

    def health(self) -> dict[str, Any]:
        """The admin listener's /health: the upstreams, their replicas and the pools."""
        return {
            "status": "ok",
            "gateway_id": self.recorder.gateway_id,
            "upstream_kind": self.upstream.kind,
            "upstreams": self.upstream.urls,
            "upstream_routing": self.upstream.router.mode,
            "replicas": self.upstream.router.snapshot(),
            "context_window": self.upstream.context_window,
            "pools": {
                p.name: {
                    "models": list(p.models),
                    "record": p.record,
                    "policy": p.policy,
                    "harness": p.harness_may_call,
                    "replicas": self.pool_clients[p.name].router.snapshot(),
                }
                for p in self.pools
            },
            "time": time.time(),
        }

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

    def _route(
        self, chat: dict[str, Any], identity: SessionIdentity
    ) -> tuple[UpstreamClient, str | None, Recorder | None]:
        """Where a call goes: the client that serves its model (the policy's own backends, or
        the pool that names it, its access checked), why its answer is untrainable (None:
        on-policy; a 400 under `refuse`), and its recorder (None: a pool not recorded)."""
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
        return client, untrainable, recorder

    async def _abandon(
        self,
        upstream: asyncio.Future[UpstreamAnswer],
        recorder: Recorder | None,
        pending: PendingCall,
        normalized: dict[str, Any],
        untrainable: str | None,
    ) -> Response:
        """A call whose caller hung up before its answer: the sampling stopped, the call
        recorded as the client's disconnect, answered 499 to nobody."""
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

    async def _serve(
        self, provider: ProviderAPI, request: Request, identity: SessionIdentity, call: CallContext
    ) -> Response:
        await self.sessions.check(identity)  # a closed session's key records nothing
        body = await read_json(request)
        pending = self.recorder.start(
            identity, body, provider=provider.name, policy_version=self.admission.policy_version
        )
        chat = provider.to_chat(body, call)
        self._check_choices(chat, provider)
        client, untrainable, recorder = self._route(chat, identity)
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
            return await self._abandon(upstream, recorder, pending, normalized, untrainable)
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
                upstream_url=exc.url,
            )
            raise
        extracted = client.extract(answer.body)
        try:  # rendered before it is recorded: an answer is recorded as answered only if it is
            response = render_answer(provider, strip_training_fields(answer.body, chat), body, call)
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
                upstream_url=answer.url,
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
            upstream_url=answer.url,
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

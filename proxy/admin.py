"""The gateway's admin listener, and pausing inference for a weight update.

The admin app (`create_admin_app`) answers on POLAR_ADMIN_PORT, apart from the
model port harnesses reach: `/admin/*` below, `/metrics` (Prometheus),
`/health`, and the model API's `/openapi.json` and `/docs`.

    POST /admin/pause[?drain_s=S]   stop admitting model calls; answer once the
                                    in-flight ones have finished (or S seconds passed)
    POST /admin/resume[?policy_version=N]
                                    admit again; held calls go through, and every call
                                    admitted from now on records weight version N
    GET  /admin/status              paused?, in flight, held, policy version

While paused a new call is held (not refused) for up to `pause_hold_s`, then
answered 503 `gateway_paused` in its caller's shape, which harness SDKs retry.
Side calls (model lists, token counts) are never held. Each gateway process
pauses on its own: a trainer pauses every gateway before it swaps weights.
Endpoints need `Authorization: Bearer <admin_token>` (or `X-Admin-Token`);
with no `admin_token` configured they answer 403.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from polar.providers import APIError
from polar.settings import GatewaySettings
from proxy.errors import install_error_handlers
from proxy.metrics import GatewayMetrics

log = logging.getLogger("polar.gateway")


class Admission:
    """Counts in-flight model calls and holds new ones while paused."""

    def __init__(self, hold_s: float, metrics: GatewayMetrics | None = None) -> None:
        self.hold_s = hold_s
        self.metrics = metrics
        self.in_flight = 0
        self.held = 0
        self.paused_at: float | None = None
        self.policy_version: int | None = None
        """the weight version served, as the last resume named it (stamped on each call)"""
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def _gauges(self) -> None:
        if self.metrics:
            self.metrics.in_flight.set(self.in_flight)
            self.metrics.held.set(self.held)
            self.metrics.paused.set(1 if self.paused else 0)

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        """Run one model call: held while paused (503 after `hold_s`), counted while running."""
        while self.paused:
            self.held += 1
            self._gauges()
            try:
                await asyncio.wait_for(self._open.wait(), self.hold_s)
            except TimeoutError:
                raise APIError(
                    503,
                    "the gateway is paused for a model update; retry later",
                    type="server_error",
                    code="gateway_paused",
                ) from None
            finally:
                self.held -= 1
                self._gauges()
        self.in_flight += 1
        self._idle.clear()
        self._gauges()
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()
            self._gauges()

    async def pause(self, drain_s: float) -> dict[str, Any]:
        """Stop admitting; wait (at most `drain_s`) until no call is in flight."""
        if not self.paused:
            self.paused_at = time.time()
        self._open.clear()
        self._gauges()
        draining = self.in_flight
        started = time.monotonic()
        with suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), drain_s)
        log.info("gateway paused: drained %d calls", draining - self.in_flight)
        return self.status() | {
            "drained": draining - self.in_flight,
            "drain_complete": self.in_flight == 0,
            "waited_s": round(time.monotonic() - started, 3),
        }

    def resume(self, policy_version: int | None = None) -> dict[str, Any]:
        """Admit calls again; from now on they are stamped with `policy_version` (None: the
        version stays as it was)."""
        if policy_version is not None:
            self.policy_version = policy_version
        released = self.held
        self._open.set()
        self.paused_at = None
        self._gauges()
        log.info("gateway resumed: releasing %d held calls", released)
        return self.status() | {"released": released}

    def status(self) -> dict[str, Any]:
        return {
            "paused": self.paused,
            "paused_at": self.paused_at,
            "in_flight": self.in_flight,
            "held": self.held,
            "policy_version": self.policy_version,
        }


def _check_token(request: Request, expected: str | None) -> None:
    if not expected:
        raise APIError(
            403, "admin endpoints are disabled: set POLAR_ADMIN_TOKEN", code="admin_disabled"
        )
    auth = request.headers.get("authorization", "")
    given = auth[7:].strip() if auth.lower().startswith("bearer ") else None
    given = given or request.headers.get("x-admin-token")
    if not given:
        raise APIError(401, "missing admin token (Authorization: Bearer ...)", code="unauthorized")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise APIError(403, "invalid admin token", code="forbidden")


def admin_routes(admission: Admission, settings: GatewaySettings) -> APIRouter:
    router = APIRouter(prefix="/admin")

    @router.post("/pause")
    async def pause(request: Request, drain_s: float | None = None) -> dict[str, Any]:
        _check_token(request, settings.admin_token)
        wait = settings.pause_drain_s if drain_s is None else max(0.0, drain_s)
        return await admission.pause(wait)

    @router.post("/resume")
    async def resume(
        request: Request, policy_version: Annotated[int | None, Query(ge=0)] = None
    ) -> dict[str, Any]:
        """Admit calls again; `policy_version`: the weight version now served (a weight sync
        names it), stamped on every call admitted after this."""
        _check_token(request, settings.admin_token)
        return admission.resume(policy_version)

    @router.get("/status")
    async def status(request: Request) -> dict[str, Any]:
        _check_token(request, settings.admin_token)
        return admission.status()

    return router


def create_admin_app(
    settings: GatewaySettings,
    admission: Admission,
    registry: CollectorRegistry,
    health: Callable[[], dict[str, Any]],
    *,
    model_schema: Callable[[], dict[str, Any]],
) -> FastAPI:
    """The gateway's admin listener: /admin/*, /metrics, /health, and the model API's docs
    (/openapi.json, /docs). Served on POLAR_ADMIN_PORT, never on the port harnesses reach."""
    app = FastAPI(title="Polar gateway admin", openapi_url=None, docs_url=None, redoc_url=None)
    install_error_handlers(app)
    app.include_router(admin_routes(admission, settings))

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/health")
    async def healthy() -> dict[str, Any]:
        return health()

    @app.get("/openapi.json")
    async def openapi() -> dict[str, Any]:
        """The model API's schema (what harnesses call on the model port)."""
        return model_schema()

    @app.get("/docs", response_class=HTMLResponse)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="Polar gateway API")

    return app

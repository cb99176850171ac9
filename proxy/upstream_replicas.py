"""The replicas behind an upstream client: its settings, pooled session and `Router`, the
URL file re-read and each replica's health probed in the background, the context window."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from polar.settings import GatewaySettings
from polar.storage import Storage
from proxy.pools import POOL_KINDS, PoolSpec
from proxy.routing import Router
from proxy.routing_store import SharedRoutes
from proxy.training_fields import KINDS

log = logging.getLogger("polar.gateway")

__all__ = [
    "JSON_HEADERS",
    "UpstreamReplicas",
    "env_proxy",
    "model_window",
    "read_urls_file",
    "server_root",
]

JSON_HEADERS = {"content-type": "application/json"}


def model_window(listing: Any) -> int | None:
    """`max_model_len` of the first model of an OpenAI-style listing (vLLM, SGLang)."""
    data = listing.get("data") if isinstance(listing, dict) else None
    for card in data if isinstance(data, list) else []:
        window = card.get("max_model_len") if isinstance(card, dict) else None
        if type(window) is int and window > 0:
            return window
    return None


def server_root(base: str) -> str:
    """The server's root for an OpenAI base (`http://h:8000/v1` → `http://h:8000`)."""
    return base[: -len("/v1")] if base.endswith("/v1") else base


def read_urls_file(path: Path) -> list[str]:
    """The bases listed in `path` (one a line or comma-separated, `#` comments); [] if
    it cannot be read (the last good list stays in use)."""
    try:
        text = path.read_text()
    except OSError as exc:
        log.warning("cannot read the upstream URL file %s: %s", path, exc)
        return []
    lines = (line.split("#", 1)[0] for line in text.splitlines())
    return [u.strip().rstrip("/") for line in lines for u in line.split(",") if u.strip()]


def env_proxy(url: str) -> str | None:
    """The proxy the environment (HTTP(S)_PROXY, NO_PROXY) names for `url`, if any."""
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


class UpstreamReplicas:
    """The OpenAI-compatible upstream bases of one client, placed by a `Router`
    (session-affine by default) over a pooled aiohttp session, and probed for health in
    the background (`start`). `proxy.upstream.UpstreamClient` makes the calls."""

    def __init__(
        self,
        settings: GatewaySettings,
        pool: PoolSpec | None = None,
        storage: Storage | None = None,
    ) -> None:
        """The policy's client (`pool` None), or the client of a named pool (`proxy.pools`):
        its own upstreams, kind, model name, routing and API key; the rest from settings.
        With `storage` (and `upstream_shared_routes`), affine placements are shared with
        every other gateway through it (`proxy.routing_store`)."""
        self.kind = (pool.kind if pool else settings.upstream_kind).strip().lower()
        if self.kind not in (POOL_KINDS if pool else KINDS):
            raise ValueError(f"unknown upstream kind {self.kind!r}: use one of {KINDS}")
        self.model = pool.model if pool else settings.upstream_model
        self.timeout_s = settings.upstream_timeout_s
        self.cache_salt = "off" if pool else settings.upstream_cache_salt
        self.urls_file = None if pool else settings.upstream_urls_file
        self.health_interval_s = settings.upstream_health_interval_s
        urls = read_urls_file(self.urls_file) if self.urls_file else []
        self.router = Router(
            list(pool.upstreams) if pool else urls or settings.upstream_url_list,
            mode=pool.routing if pool else settings.upstream_routing,
            load_factor=settings.upstream_load_factor,
            max_inflight=settings.upstream_max_inflight,
            spill_abs=settings.upstream_spill_abs,
            spill_rel=settings.upstream_spill_rel,
            live_s=settings.upstream_session_live_s,
            down_s=settings.upstream_down_s,
        )
        shared = storage is not None and settings.upstream_shared_routes
        self.shared_routes = (
            SharedRoutes(storage, self.router, pool.name if pool else "policy")
            if shared and storage is not None and self.router.mode == "affine"
            else None
        )
        key = pool.api_key() if pool else None
        self._auth = {"authorization": f"Bearer {key}"} if key else {}
        self.headers = JSON_HEADERS | self._auth
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[str, str | None] = {}
        self._monitor: asyncio.Task[None] | None = None
        self.context_window: int | None = None
        """the model's context window, `max_model_len` of the backend's /v1/models"""

    @property
    def urls(self) -> list[str]:
        """The upstream bases now in use."""
        return self.router.urls

    @property
    def session(self) -> aiohttp.ClientSession:
        """The pooled client session, made on first use (inside the serving event loop)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(
                    total=self.timeout_s, connect=min(self.timeout_s, 10.0)
                ),
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
                trust_env=False,  # its proxy lookup is a thread hop per call: `_proxies`
            )
        return self._session

    def start(self) -> None:
        """Start the background probe of the replicas (and re-reading of the URL file);
        with probes off, read the model's context window once."""
        if self._monitor is None:
            watch = self._watch() if self.health_interval_s > 0 else self._read_window()
            self._monitor = asyncio.get_running_loop().create_task(watch)

    async def aclose(self) -> None:
        if self.shared_routes is not None:
            await self.shared_routes.drain()
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
            self._monitor = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _watch(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # noqa: BLE001 - the probe must outlive any one failure
                log.exception("upstream health probe failed")
            await asyncio.sleep(self.health_interval_s)

    async def refresh(self) -> None:
        """Re-read the URL file (if any), then probe every replica's health once."""
        if self.urls_file is not None:
            urls = await asyncio.to_thread(read_urls_file, self.urls_file)
            if urls and self.router.set_replicas(urls):
                log.info("upstream replicas now %s", urls)
        bases = self.router.urls
        verdicts = await asyncio.gather(*(self._probe(base) for base in bases))
        for base, ok in zip(bases, verdicts, strict=True):
            self.router.set_health(base, ok)
        if self.context_window is None and any(verdicts):
            await self._read_window()

    async def _read_window(self) -> None:
        """Learn the context window from the first replica whose /v1/models gives one."""
        for base in self.router.urls:
            try:
                async with self.session.get(
                    f"{base}/models",
                    headers=self._auth,
                    proxy=self._proxy(base),
                    timeout=aiohttp.ClientTimeout(5),
                ) as response:
                    body = await response.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log.info("no model card from %s: %s", base, exc)
                continue
            window = model_window(body)
            if window is not None:
                self.context_window = window
                return

    async def _probe(self, base: str) -> bool:
        """GET the server's /health (vLLM, SGLang), or its /v1/models where it has no
        /health (a proxy in front of it): True on a 2xx answer."""
        try:
            status = await self._get_status(f"{server_root(base)}/health", base)
            if status in (404, 405):
                status = await self._get_status(f"{base}/models", base)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("upstream %s failed its health probe: %s", base, exc)
            return False
        if not 200 <= status < 300:
            log.warning("upstream %s failed its health probe: HTTP %d", base, status)
        return 200 <= status < 300

    async def _get_status(self, url: str, base: str) -> int:
        timeout = aiohttp.ClientTimeout(total=5)
        async with self.session.get(
            url, headers=self._auth, proxy=self._proxy(base), timeout=timeout
        ) as response:
            await response.read()
            return response.status

    def _proxy(self, base: str) -> str | None:
        if base not in self._proxies:
            self._proxies[base] = env_proxy(base)
        return self._proxies[base]

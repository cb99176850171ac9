"""The client of the inference backends (vLLM or SGLang) behind the gateway.

`normalize` turns a caller's Chat Completions request into the one sent
upstream: training fields added by backend kind, never streaming, model name
pinned. `UpstreamClient.complete` sends it over a pooled aiohttp session to the
replica its session is placed on (`proxy.routing`: session-affine with bounded
load, or round-robin; an unreachable replica is marked down and skipped) and turns
transport failures and error statuses into `UpstreamError`s (rendered in the
caller's own error shape at the edge).
`extract` reads the token ids, logprobs and finish reason out of the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from polar import fastjson
from polar.providers import CONTEXT_CODE, APIError, ContextOverflow
from polar.records import SampledChoice
from polar.session_keys import SessionIdentity
from polar.settings import Settings
from proxy.pools import POOL_KINDS, PoolSpec
from proxy.routing import Router

log = logging.getLogger("polar.gateway")

KINDS = ("vllm", "sglang")
"""The policy's upstream kinds (training fields asked for); a pool may also be `openai`
(proxy/pools.py `POOL_KINDS`)."""
JSON_HEADERS = {"content-type": "application/json"}
ROUTING_HEADER = "x-session-id"
"""carries a call's routing key upstream, for a router in front of the servers"""


class UpstreamError(APIError):
    """An upstream call that gave no usable answer, in the caller's error shape."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        code: str | None = None,
        type: str | None = None,
        url: str | None = None,
        upstream_status: int | None = None,
        upstream_body: dict[str, Any] | None = None,
        overflow: ContextOverflow | None = None,
    ) -> None:
        super().__init__(status_code, message, code=code, type=type, overflow=overflow)
        self.url = url
        self.upstream_status = upstream_status
        self.upstream_body = upstream_body


@dataclass
class UpstreamAnswer:
    """A successful upstream answer: parsed JSON body, status and the base URL that served it."""

    body: dict[str, Any]
    status_code: int
    url: str


@dataclass
class Extracted:
    """The training data read out of an upstream answer (top-level fields: the first choice)."""

    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    response_logprobs: list[float] | None = None
    finish_reason: str | None = None
    model: str | None = None
    choices: list[SampledChoice] = field(default_factory=list)
    """every choice, when the answer has several (`n > 1`); empty for one"""

    @property
    def sampled_tokens(self) -> int:
        """Sampled ids over every choice."""
        if not self.choices:
            return len(self.response_token_ids or [])
        return sum(len(c.response_token_ids or []) for c in self.choices)

    @property
    def has_token_ids(self) -> bool:
        return self.prompt_token_ids is not None and self.response_token_ids is not None


# --------------------------------------------------------------------------- request


def normalize(request: dict[str, Any], kind: str, model: str | None) -> dict[str, Any]:
    """The request sent upstream: a copy of the caller's, non-streaming, with training fields.

    Only the top level is copied (the caller's request is left as it was); nested values
    are shared with it and never changed.
    """
    out = dict(request)
    out.pop("stream", None)
    out.pop("stream_options", None)
    if model:
        out["model"] = model
    if kind == "openai":  # a plain OpenAI-compatible API (a pool's): no training fields
        return out
    out["logprobs"] = True
    if kind == "vllm":
        asked = out.get("top_logprobs")
        out["top_logprobs"] = asked if isinstance(asked, int) and asked > 0 else 0
        out["return_token_ids"] = True
    elif kind == "sglang":
        out["return_prompt_token_ids"] = True
        out["return_token_ids"] = True
        out["return_meta_info"] = True
    else:
        raise ValueError(f"unknown upstream kind {kind!r}: use one of {KINDS}")
    return out


# --------------------------------------------------------------------------- answer


def _int_list(value: Any) -> list[int] | None:
    """`value` itself if it is a list of ints (no bools), else None. Not copied: a
    prompt's ids are tens of thousands of ints, and nothing changes the answer's lists."""
    if isinstance(value, list) and set(map(type, value)) <= {int}:
        return value
    return None


def _float_list(values: list[Any]) -> list[float] | None:
    out: list[float] = []
    for v in values:
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            return None
        out.append(float(v))
    return out


def _vllm_logprobs(choice: dict[str, Any]) -> list[float] | None:
    content = (choice.get("logprobs") or {}).get("content")
    if not isinstance(content, list):
        return None
    return _float_list([i.get("logprob") if isinstance(i, dict) else None for i in content])


def _sglang_meta_logprobs(choice: dict[str, Any]) -> list[list[Any]] | None:
    entries = (choice.get("meta_info") or {}).get("output_token_logprobs")
    if isinstance(entries, list) and all(isinstance(e, list) and len(e) >= 2 for e in entries):
        return entries
    return None


def _sampled(choice: dict[str, Any], kind: str) -> SampledChoice:
    """The sampled ids, their logprobs and the finish reason of one choice."""
    response_ids = _int_list(choice.get("token_ids"))
    meta = _sglang_meta_logprobs(choice)
    meta_logprobs = _float_list([e[0] for e in meta]) if meta is not None else None
    if kind == "sglang":
        if response_ids is None and meta is not None:
            response_ids = _int_list([e[1] for e in meta])
        logprobs = meta_logprobs if meta_logprobs is not None else _vllm_logprobs(choice)
    else:
        logprobs = _vllm_logprobs(choice)
        if logprobs is None:
            logprobs = meta_logprobs
    finish = choice.get("finish_reason")
    index = choice.get("index")
    return SampledChoice(
        index=index if type(index) is int else 0,
        response_token_ids=response_ids,
        response_logprobs=logprobs,
        finish_reason=finish if isinstance(finish, str) else None,
    )


def extract(body: dict[str, Any], kind: str) -> Extracted:
    """Prompt ids, and the sampled ids, their logprobs and finish reason of each choice.

    vLLM: top-level `prompt_token_ids`, `choices[i].token_ids`,
    `choices[i].logprobs.content[].logprob`. SGLang: `choices[0].prompt_token_ids`,
    `choices[i].token_ids`, `choices[i].meta_info.output_token_logprobs` as
    `[logprob, id, text]`. Each falls back on the other's location; missing parts are None.
    The top-level fields are the first choice's; `choices` lists them all when there are
    several (`n > 1`), each at its position.
    """
    raw = body.get("choices")
    choices = [c if isinstance(c, dict) else {} for c in raw] if isinstance(raw, list) else []
    choice = choices[0] if choices else {}
    model = body.get("model") if isinstance(body.get("model"), str) else None
    top_prompt = _int_list(body.get("prompt_token_ids"))
    choice_prompt = _int_list(choice.get("prompt_token_ids"))
    if kind == "sglang":
        prompt_ids = choice_prompt if choice_prompt is not None else top_prompt
    else:
        prompt_ids = top_prompt if top_prompt is not None else choice_prompt
    sampled = [
        _sampled(c, kind).model_copy(update={"index": i}) for i, c in enumerate(choices)
    ] or [SampledChoice(index=0)]
    first = sampled[0]
    return Extracted(
        prompt_token_ids=prompt_ids,
        response_token_ids=first.response_token_ids,
        response_logprobs=first.response_logprobs,
        finish_reason=first.finish_reason,
        model=model,
        choices=sampled if len(sampled) > 1 else [],
    )


def strip_training_fields(body: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The caller's view of an upstream answer: training-only fields it did not ask for removed.

    `body` is left as it was: the top level and each choice are copied (shallowly), which
    is all this changes; nested values are shared.
    """
    out = dict(body)
    wants_ids = bool(request.get("return_token_ids"))
    wants_prompt_ids = wants_ids or bool(request.get("return_prompt_token_ids"))
    if not wants_prompt_ids:
        out.pop("prompt_token_ids", None)
    if isinstance(out.get("choices"), list):
        out["choices"] = [dict(c) if isinstance(c, dict) else c for c in out["choices"]]
    for choice in out.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        if not wants_ids:
            choice.pop("token_ids", None)
        if not wants_prompt_ids:
            choice.pop("prompt_token_ids", None)
        if not request.get("return_meta_info"):
            choice.pop("meta_info", None)
        if not request.get("logprobs") and "logprobs" in choice:
            choice["logprobs"] = None
    return out


# --------------------------------------------------------------------------- client


def _error_message(status: int, reason: str, content: bytes) -> tuple[str, dict[str, Any] | None]:
    """The message of an upstream error body (OpenAI, old-vLLM or FastAPI shape) and the body."""
    try:
        data = fastjson.loads(content)
    except ValueError:
        text = content.decode("utf-8", "replace").strip()
        return (text[:2000] or reason or "upstream error"), None
    if not isinstance(data, dict):
        return json.dumps(data)[:2000], None
    err = data.get("error")
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"]), data
    for value in (err, data.get("message"), data.get("detail")):
        if value:
            return (value if isinstance(value, str) else json.dumps(value))[:2000], data
    return json.dumps(data)[:2000], data


_LIMIT = re.compile(
    r"maximum context length (?:is|of) (\d+)|context length \((\d+) tokens\)", re.IGNORECASE
)
_PROMPT = re.compile(  # the first of these in the message: the tokens past the window
    r"contains (?:at least )?(\d+) input tokens"  # vLLM 0.1x+
    r"|requested (?:a total of )?(\d+) tokens"  # older vLLM and SGLang: prompt + completion
    r"|messages resulted in (\d+) tokens"  # OpenAI
    r"|input \((\d+) tokens\)",  # SGLang: "The input (P tokens) is longer than ..."
    re.IGNORECASE,
)


def context_overflow(message: str) -> ContextOverflow | None:
    """The context overflow a backend's 400 message reports (vLLM: "This model's maximum
    context length is N tokens. However, your prompt contains P input tokens ..."; SGLang:
    "The input (P tokens) is longer than the model's context length (N tokens)."), if any."""
    limit = _LIMIT.search(message)
    if limit is None:
        return None
    prompt = _PROMPT.search(message)
    prompt_tokens = next((int(g) for g in prompt.groups() if g), None) if prompt else None
    return ContextOverflow(int(limit[1] or limit[2]), prompt_tokens)


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


class UpstreamClient:
    """Pooled async client of the OpenAI-compatible upstream bases, placed by a `Router`
    (session-affine by default) and probed for health in the background (`start`).

    aiohttp: per call it costs a fifth of httpx's CPU (bench/README.md, gateway overhead).
    """

    def __init__(self, settings: Settings, pool: PoolSpec | None = None) -> None:
        """The policy's client (`pool` None), or the client of a named pool (`proxy.pools`):
        its own upstreams, kind, model name, routing and API key; the rest from settings."""
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
            down_s=settings.upstream_down_s,
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

    def normalize(
        self, request: dict[str, Any], identity: SessionIdentity | None = None
    ) -> dict[str, Any]:
        out = normalize(request, self.kind, self.model)
        if identity is not None and self.cache_salt != "off" and self.kind == "vllm":
            salt = identity.session_id if self.cache_salt == "session" else identity.task_id
            out["cache_salt"] = salt
        return out

    def extract(self, body: dict[str, Any]) -> Extracted:
        return extract(body, self.kind)

    async def complete(self, normalized: dict[str, Any], key: str | None = None) -> UpstreamAnswer:
        """POST the normalized request to the replica `key` is placed on (`Router`; None:
        round-robin); the parsed answer, or raise UpstreamError (502/504/4xx). A replica
        that cannot be reached is marked down, and one that drops the connection counted
        as failed; either way the next one is tried."""
        failures: list[str] = []
        data = fastjson.dumps(normalized)
        headers = self.headers if key is None else {**self.headers, ROUTING_HEADER: key}
        router = self.router
        for base in router.order(key):
            url = f"{base}/chat/completions"
            router.acquire(base)
            try:
                async with self.session.post(
                    url, data=data, headers=headers, proxy=self._proxy(base)
                ) as response:
                    content = await response.read()
                    status, reason = response.status, response.reason or ""
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
                # never delivered: safe to try the next base
                router.failed(base, unreachable=True)
                failures.append(f"{base}: {type(exc).__name__}: {exc}")
                log.warning("upstream %s unreachable: %s", base, exc)
                continue
            except (
                aiohttp.ServerDisconnectedError,
                aiohttp.ClientOSError,
                aiohttp.ClientConnectionResetError,
            ) as exc:
                # the connection dropped (a replica that died, or a stale pooled connection):
                # no answer came, and nothing is recorded of a call without one; the next
                # replica samples it afresh
                router.failed(base)
                failures.append(f"{base}: {type(exc).__name__}: {exc}")
                log.warning("upstream %s dropped the call: %s", base, exc)
                continue
            except TimeoutError as exc:  # aiohttp's timeouts are TimeoutErrors too
                router.failed(base)
                raise UpstreamError(
                    504,
                    f"upstream {base} timed out after {self.timeout_s:g}s ({type(exc).__name__})",
                    code="upstream_timeout",
                    url=base,
                ) from exc
            except aiohttp.ClientError as exc:
                router.failed(base)
                raise UpstreamError(
                    502,
                    f"upstream {base} failed: {type(exc).__name__}: {exc}",
                    code="upstream_error",
                    url=base,
                ) from exc
            finally:
                router.release(base)
            if status >= 500:
                router.failed(base)
            else:
                router.succeeded(base)
            return self._answer(base, status, reason, content)
        raise UpstreamError(
            502, "no upstream reachable: " + "; ".join(failures), code="upstream_unreachable"
        )

    def _answer(self, base: str, status: int, reason: str, content: bytes) -> UpstreamAnswer:
        if status >= 400:
            message, data = _error_message(status, reason, content)
            if status >= 500 or status in (401, 403):
                # the backend's fault or the gateway's configuration, not the caller's request
                raise UpstreamError(
                    502,
                    f"upstream {base} answered {status}: {message}",
                    code="upstream_error",
                    url=base,
                    upstream_status=status,
                    upstream_body=data,
                )
            overflow = context_overflow(message) if status in (400, 413, 422) else None
            raise UpstreamError(
                400 if overflow else status,
                message,
                url=base,
                upstream_status=status,
                upstream_body=data,
                code=CONTEXT_CODE if overflow else _upstream_code(data),
                overflow=overflow,
            )
        try:
            body = fastjson.loads(content)
        except ValueError as exc:
            raise UpstreamError(
                502,
                f"upstream {base} answered {status} with a body that is not JSON",
                code="upstream_error",
                url=base,
                upstream_status=status,
            ) from exc
        if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
            raise UpstreamError(
                502,
                f"upstream {base} answered {status} without 'choices'",
                code="upstream_error",
                url=base,
                upstream_status=status,
                upstream_body=body if isinstance(body, dict) else None,
            )
        return UpstreamAnswer(body=body, status_code=status, url=base)


def _upstream_code(data: dict[str, Any] | None) -> str | None:
    err = (data or {}).get("error")
    code = err.get("code") if isinstance(err, dict) else None
    return code if isinstance(code, str) else None

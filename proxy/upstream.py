"""The client of the inference backends (vLLM or SGLang) behind the gateway.

`normalize` (proxy/training_fields.py) turns a caller's Chat Completions request
into the one sent upstream: training fields added by backend kind, never streaming,
model name pinned. `UpstreamClient.complete` sends it over a pooled aiohttp session to the
replica its session is placed on (`proxy.routing`: placed by load and then sticky, shared
by every gateway through `proxy.routing_store`; an unreachable replica is marked down
and skipped) and turns
transport failures and error statuses into `UpstreamError`s (rendered in the
caller's own error shape at the edge).
`extract` reads the token ids, logprobs and finish reason out of the answer.
The replicas, their health and the pooled session are `UpstreamReplicas`
(proxy/upstream_replicas.py); an answer is read, or made an `UpstreamError`, by
proxy/upstream_answers.py.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp

from polar import fastjson
from polar.session_keys import SessionIdentity
from proxy.routing import Placement
from proxy.training_fields import Extracted, extract, normalize
from proxy.upstream_answers import UpstreamAnswer, UpstreamError, read_answer
from proxy.upstream_replicas import UpstreamReplicas

log = logging.getLogger("polar.gateway")

__all__ = ["ROUTING_HEADER", "UpstreamClient"]

ROUTING_HEADER = "x-session-id"
"""carries a call's routing key upstream, for a router in front of the servers"""
BYTES_PER_TOKEN = 4
"""a request's prompt tokens, estimated from its JSON size (load in flight, for placement)"""


class UpstreamClient(UpstreamReplicas):
    """Pooled async client of the OpenAI-compatible upstream bases, placed by a `Router`
    (session-affine by default) and probed for health in the background (`start`).

    aiohttp: per call it costs a fifth of httpx's CPU (bench/README.md, gateway overhead).
    """

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
        tokens = len(data) // BYTES_PER_TOKEN
        headers = self.headers if key is None else {**self.headers, ROUTING_HEADER: key}
        router, shared = self.router, self.shared_routes
        if shared is not None and key is not None:
            await shared.before(key, normalized.get("messages"))
        placement = router.place(key)
        home = router.home_of(key) if key is not None else None
        if shared is not None and key is not None:
            shared.placed(key, placement)
        for base in router.order(key, placement):
            if shared is not None and key is not None and home != router.home_of(key):
                home = router.home_of(key)  # its home was lost mid-call: moved by load
                shared.placed(key, Placement(base, "move"))
            url = f"{base}/chat/completions"
            router.acquire(base, tokens)
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
                router.release(base, tokens)
            if status >= 500:
                router.failed(base)
            else:
                router.succeeded(base)
            return read_answer(base, status, reason, content)
        raise UpstreamError(
            502, "no upstream reachable: " + "; ".join(failures), code="upstream_unreachable"
        )

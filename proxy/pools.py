"""Named backend pools: which backends serve a model name, and whether its calls are trained.

The policy pool is the gateway's upstream (`POLAR_UPSTREAM_URLS`, ...): its calls
are recorded and are policy samples. `POLAR_POOLS` names further pools, each
with the model names it serves (exact, or a prefix ending in `*`), its
upstreams and their kind, the model name sent upstream, a host-side API key
(read from an environment variable, never from the pool's text), and two rules:

* `record` (default true): its calls are written to S3 like the policy's;
* `policy` (default false): its calls are samples of the policy. A call of a
  pool that is not the policy is recorded `untrainable` ("pool NAME: not the
  policy"), so no builder trains on it and the build counts it among the
  unseen completions (`untrainable`);
* `harness` (default: the pool's `policy`): whether a harness's key may call
  it. A pool that is not the policy (the rubric judge, a stronger model) is
  the worker's own: only a key of `WORKER_ATTEMPT` (the judge's) reaches it,
  and a harness asking for one of its models gets 404 `model_not_found`, so a
  harness cannot grade its work with the judge, nor have another model do it.
  Set it true for a side model the harness itself calls (Claude Code's small
  model), knowing its answers then reach the session's work.

A model no pool names goes to the policy pool, as before. `POLAR_POOLS` is a
JSON object (or the path of a file holding one):

    {"judge": {"models": ["judge", "rubric-*"], "upstreams": ["http://judge:8000/v1"],
               "kind": "openai", "model": "Qwen3-32B", "policy": false},
     "side":  {"models": ["claude-haiku*"], "upstreams": ["http://small:8000/v1"],
               "record": false, "harness": true}}
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar.registry import Registry, UnknownKind
from polar.session_keys import WORKER_ATTEMPT

FIELDS = {
    "models",
    "upstreams",
    "kind",
    "model",
    "record",
    "policy",
    "harness",
    "api_key_env",
    "routing",
}


class PoolError(ValueError):
    """POLAR_POOLS cannot be used as written."""


class UnknownPoolKind(PoolError, UnknownKind):
    """A pool's `kind` names no kind of backend the gateway speaks to."""


POOL_KINDS: Registry[str] = Registry(
    "pool kind",
    {
        "vllm": "vLLM: token ids and log probabilities asked for",
        "sglang": "SGLang: token ids and log probabilities asked for",
        "openai": "a plain OpenAI-compatible API: no training fields",
    },
    UnknownPoolKind,
)
"""The kinds of backend a pool may have, each with what the gateway asks of it
(polar/registry.py)."""


@dataclass(frozen=True)
class PoolSpec:
    """One named pool of backends."""

    name: str
    models: tuple[str, ...]
    upstreams: tuple[str, ...]
    kind: str = "vllm"
    """vllm / sglang: training fields asked for; openai: a plain OpenAI-compatible API"""
    model: str | None = None
    """the model name sent upstream; None keeps the caller's"""
    record: bool = True
    policy: bool = False
    api_key_env: str | None = None
    """the environment variable holding the upstream's API key (sent as a bearer token)"""
    routing: str = "affine"
    harness: bool | None = None
    """whether a harness's key may call it; None: only if it is a policy pool"""

    @property
    def harness_may_call(self) -> bool:
        return self.policy if self.harness is None else self.harness

    def may_serve(self, attempt: int) -> bool:
        """Whether a key of `attempt` may call this pool: a harness's only if the pool is
        open to harnesses; the worker's own (`WORKER_ATTEMPT`) always."""
        return attempt == WORKER_ATTEMPT or self.harness_may_call

    def serves(self, model: str) -> int:
        """How well this pool's names match `model`: 0 not at all; longer is closer, and an
        exact name beats any prefix."""
        best = 0
        for name in self.models:
            if name.endswith("*"):
                if model.startswith(name[:-1]):
                    best = max(best, len(name))
            elif model == name:
                return 1 << 30
        return best

    @property
    def untrainable(self) -> str | None:
        """Why its calls are never trained (None for a policy pool)."""
        return None if self.policy else f"pool {self.name}: not the policy"

    def api_key(self) -> str | None:
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise PoolError(f"pool {self.name}: ${self.api_key_env} (its api_key_env) is not set")
        return key


def _strings(name: str, field: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise PoolError(f"pool {name}: {field!r} must be a non-empty list of strings")
    return tuple(v.strip().rstrip("/") if field == "upstreams" else v for v in value)


def _pool(name: str, spec: Any) -> PoolSpec:
    if not isinstance(spec, dict):
        raise PoolError(f"pool {name}: must be an object")
    unknown = set(spec) - FIELDS
    if unknown:
        raise PoolError(f"pool {name}: unknown fields {sorted(unknown)}; use {sorted(FIELDS)}")
    kind = spec.get("kind", "vllm")
    try:
        POOL_KINDS.get(kind)
    except UnknownPoolKind as exc:
        raise UnknownPoolKind(f"pool {name}: {exc}", exc.kind, exc.known) from None
    for flag in ("record", "policy", "harness"):
        if not isinstance(spec.get(flag, True), bool):
            raise PoolError(f"pool {name}: {flag!r} must be true or false")
    for text in ("model", "api_key_env", "routing"):
        if spec.get(text) is not None and not isinstance(spec[text], str):
            raise PoolError(f"pool {name}: {text!r} must be a string")
    return PoolSpec(
        name=name,
        models=_strings(name, "models", spec.get("models")),
        upstreams=_strings(name, "upstreams", spec.get("upstreams")),
        kind=kind,
        model=spec.get("model"),
        record=spec.get("record", True),
        policy=spec.get("policy", False),
        api_key_env=spec.get("api_key_env"),
        routing=spec.get("routing", "affine"),
        harness=spec.get("harness"),
    )


def parse_pools(value: str | None) -> list[PoolSpec]:
    """The pools of POLAR_POOLS: a JSON object, or the path of a file holding one."""
    if value is None or not value.strip():
        return []
    text = value
    if not value.lstrip().startswith(("{", "[")):
        try:
            text = Path(value).read_text()
        except OSError as exc:
            raise PoolError(f"POLAR_POOLS: not a JSON object, nor a file: {exc}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PoolError(f"POLAR_POOLS is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise PoolError("POLAR_POOLS must be a JSON object of pool name -> pool")
    if "policy" in data:
        raise PoolError("POLAR_POOLS: 'policy' is the gateway's own pool (POLAR_UPSTREAM_URLS)")
    return [_pool(str(name), spec) for name, spec in data.items()]


def pool_for(pools: list[PoolSpec], model: Any) -> PoolSpec | None:
    """The pool that serves `model` (the closest name), or None for the policy pool."""
    if not isinstance(model, str) or not pools:
        return None
    score, best = max(((p.serves(model), i) for i, p in enumerate(pools)), default=(0, -1))
    return pools[best] if score > 0 else None

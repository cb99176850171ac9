"""What only the gateway reads: its upstreams and routing, named pools, limits on calls and
records, pausing, and the tokenizer's model dir."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from polar.settings.service import ServiceSettings


class GatewaySettings(ServiceSettings):
    """The gateway process's settings (`polar gateway`)."""

    upstream_urls: str = Field(
        default="http://127.0.0.1:8000/v1", description="comma-separated OpenAI-compatible bases"
    )
    upstream_kind: str = Field(default="vllm", description="vllm or sglang: which training fields")
    upstream_model: str | None = Field(
        default="policy", description="model name sent upstream; None keeps the caller's"
    )
    upstream_timeout_s: float = Field(
        default=600.0, description="one upstream call's limit (past it: 504, recorded as failed)"
    )
    upstream_urls_file: Path | None = Field(
        default=None,
        description="a file of upstream bases (one a line or comma-separated) the gateway "
        "re-reads every upstream_health_interval_s; replaces upstream_urls while non-empty",
    )
    upstream_routing: Literal["affine", "hash", "round_robin"] = Field(
        default="affine",
        description="affine: a session (and prefix chain) is placed by load on its first call "
        "and stays on that replica; hash: consistent hashing with bounded load; round_robin: "
        "each call to the next replica",
    )
    upstream_load_factor: float = Field(
        default=1.25,
        ge=1.0,
        description="hash routing: no replica takes a call past this times the mean in-flight",
    )
    upstream_max_inflight: int = Field(
        default=0,
        ge=0,
        description="calls one replica gets at once before a call spills (somewhat above its "
        "own limit, e.g. twice vLLM's max_num_seqs: a spill re-prefills the history); 0: no limit",
    )
    upstream_spill_abs: int = Field(
        default=16,
        ge=0,
        description="affine routing: a call spills off its home only when home would have this "
        "many more calls in flight than the least-loaded replica...",
    )
    upstream_spill_rel: float = Field(
        default=2.0,
        ge=1.0,
        description="...and more than this times the least-loaded replica's",
    )
    upstream_session_live_s: float = Field(
        default=60.0,
        gt=0.0,
        description="affine routing: the longest a silent session counts in its replica's load "
        "(sooner: three of its usual gaps between calls, at least 5 s)",
    )
    upstream_shared_routes: bool = Field(
        default=True,
        description="affine routing: share each session's replica through S3 "
        "(sessions/{id}/routes/), so every gateway, and a restarted one, sends it to the same",
    )
    upstream_health_interval_s: float = Field(
        default=5.0, ge=0.0, description="how often replicas' /health is probed; 0: never"
    )
    upstream_down_s: float = Field(
        default=10.0, description="how long a replica that failed is skipped (passive health)"
    )
    pools: str | None = Field(
        default=None,
        description="named backend pools beside the policy's, a JSON object or a file of one: "
        "model names or prefixes, upstreams, recorded, policy samples, open to harnesses "
        "(docs/gateway.md)",
    )
    upstream_cache_salt: Literal["off", "session", "task"] = Field(
        default="off",
        description="vLLM cache_salt per session or task (isolates prefix caches; off shares "
        "prefixes across sessions); sampling is unchanged",
    )
    closed_check_s: float = Field(
        default=2.0, description="how long the gateway trusts that a session is still open"
    )
    pause_hold_s: float = Field(
        default=300.0, description="how long a paused gateway holds a new call before a 503"
    )
    pause_drain_s: float = Field(
        default=600.0, description="how long POST /admin/pause waits for in-flight calls"
    )
    max_body_bytes: int = Field(
        default=32 * 1024 * 1024,
        description="largest request body the gateway reads (413 past it, while reading); 0: off",
    )
    max_choices: int = Field(
        default=16, ge=1, description="most choices (n, candidateCount) one call may sample"
    )
    metrics_max_sessions: int = Field(
        default=1000,
        description="per-session token series the gateway keeps (most recent); 0: none",
    )
    max_record_bytes: int = Field(
        default=8 * 1024 * 1024,
        description="largest stored completion record (compressed); a call past it is refused "
        "413 `record_too_large`, unrecorded; 0: off",
    )
    max_session_bytes: int = Field(
        default=1024 * 1024 * 1024,
        description="most completion-record bytes one session may store; calls past it are "
        "refused 403 `session_quota_exceeded`, what is recorded stays; 0: off",
    )
    off_policy: Literal["refuse", "record_untrainable"] = Field(
        default="refuse",
        description="what the gateway does with a call whose sampling controls make its sample "
        "off-policy (logit_bias, allowed_token_ids, bad_words, min_tokens, guided decoding, "
        "forced tool choice, per-request templates...): refuse it (400), or answer and record "
        "it marked untrainable (no builder trains on it)",
    )
    model_dir: Path | None = Field(
        default=None, description="HF model dir the dev vLLM serves; unset: the tiny model"
    )

    @property
    def upstream_url_list(self) -> list[str]:
        return [u.strip().rstrip("/") for u in self.upstream_urls.split(",") if u.strip()]

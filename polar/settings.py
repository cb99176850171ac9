"""Polar's configuration, read from `POLAR_*` environment variables (and flags of the CLI).

The embedded dev stack and production use the same settings: production points
`temporal_address`, `s3_endpoint` and `upstream_urls` at a Temporal cluster,
AWS S3 and a vLLM/SGLang fleet.
"""

from __future__ import annotations

import json
import os
import re
import socket
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from polar.assets import checkout_root
from polar.network_policy import DEFAULT_BLOCKED_NETWORKS, blocked_networks, parse_allowed_host


def checkout_path(relative: str) -> Path:
    """`relative` inside the checkout Polar runs from (the venvs and npm CLIs that
    infra/setup.sh makes there); in an installed wheel, relative to the working directory.
    Each such path is a setting, and its users say which `POLAR_*` names it when missing."""
    root = checkout_root()
    return root / relative if root is not None else Path(relative)


def default_data_dir() -> Path:
    """The stack's state dir unless `POLAR_DATA_DIR` says otherwise: outside any checkout and
    the default source roots (the worker's working directory), so that a session's pytest,
    whose config search walks up from its workspace through the data dir, never meets the
    project's own `pyproject.toml`. Root: `/var/lib/polar` (root's home is closed to the
    sandbox users, who must reach their session dirs below it); others:
    `$XDG_STATE_HOME/polar`, by default `~/.local/state/polar`."""
    if os.geteuid() == 0:
        return Path("/var/lib/polar")
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if Path(state).is_absolute() else Path.home() / ".local" / "state"
    return base / "polar"


class Settings(BaseSettings):
    """Every knob of Polar; each field is `POLAR_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="POLAR_", extra="ignore")

    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="dev-stack state, logs, the runtimes' session dirs; default: /var/lib/polar "
        "for root, else $XDG_STATE_HOME/polar (~/.local/state/polar): outside the checkout and "
        "the default source roots, so a session's pytest never meets the project's config",
    )

    # Temporal
    temporal_address: str = Field(default="127.0.0.1:7233", description="Temporal frontend")
    temporal_namespace: str = Field(default="default", description="Temporal namespace")
    temporal_ui_port: int = Field(default=8233, description="Web UI port of the dev server")
    task_queue: str = Field(
        default="polar", description="workflow queue; stages use {queue}-init/-run/-postrun"
    )

    # host identity: a session's runtime lives on one host; its later stages follow it there
    host_id: str = Field(
        default_factory=socket.gethostname,
        description="stable id of this host (default: the hostname); its queues are "
        "{queue}-host-{host_id}[-init|-run|-postrun]",
    )
    sweep_interval_s: float = Field(
        default=300.0,
        ge=0,
        description="how often a worker removes its host's runtimes of closed sessions; 0: "
        "only at start",
    )

    # leaving: SIGTERM (a Slurm time limit, scancel, a pod's end) stops polling at once
    shutdown_grace_s: float = Field(
        default=10.0,
        ge=0,
        description="after SIGTERM, how long running stages may go on before they are "
        "cancelled; keep it under the scheduler's kill wait (Slurm: KillWait, --signal)",
    )
    release_on_exit: bool = Field(
        default=False,
        description="on exit, tear down every runtime of this host (a node given back to the "
        "scheduler): its sessions are re-placed elsewhere by the host-loss logic",
    )

    # the local runtime's sandbox (activities/runtimes/sandboxes/local_sandbox.py, bwrap.py)
    allow_unsealed: bool = Field(
        default=False,
        description="let the local runtime run sessions unsealed where this host cannot seal "
        "them (no root and no unprivileged user namespaces): trusted harnesses only",
    )
    sandbox_cgroup: Path | None = Field(
        default=None,
        description="a cgroup v2 dir the host delegates to this (non-root) worker: each bwrap "
        "sandbox gets a child of it with the session's memory, pids and cpu limits",
    )

    # worker pool caps
    max_init: int = Field(default=8, description="per-worker cap of the init pool's activities")
    max_run: int = Field(default=8, description="per-worker cap of harness runs")
    max_postrun: int = Field(
        default=4, description="per-worker cap of the postrun pool (build, evaluate, score)"
    )

    # S3
    s3_endpoint: str | None = Field(
        default="http://127.0.0.1:8333", description="S3 endpoint (SeaweedFS); unset: AWS S3"
    )
    s3_bucket: str = Field(default="polar", description="bucket of records, traces, artifacts")
    s3_region: str = Field(default="us-east-1", description="S3 region")
    s3_access_key: str | None = Field(
        default=None, description="unset: boto3's own chain (role, AWS_* env); dev: generated"
    )
    s3_secret_key: str | None = Field(default=None, description="the secret of s3_access_key")

    # gateway
    gateway_host: str = Field(default="127.0.0.1", description="where the gateway listens")
    gateway_port: int = Field(default=8400, description="the gateway's model port")
    gateway_url: str | None = Field(
        default=None, description="URL harnesses reach the gateway at; default from host/port"
    )
    session_secret: str | None = Field(
        default=None,
        description="HMAC secret shared by workers (which mint session keys) and gateways; "
        "required (the dev stack generates one per data dir, polar.credentials)",
    )
    admin_host: str = Field(
        default="127.0.0.1", description="the gateway's admin listener (never the model port)"
    )
    admin_port: int = Field(
        default=8401,
        description="admin, metrics, health and docs of the gateway (POLAR_ADMIN_PORT)",
    )
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
    upstream_routing: Literal["affine", "round_robin"] = Field(
        default="affine",
        description="affine: a session (and prefix chain) stays on one replica, consistent "
        "hashing with bounded load; round_robin: each call to the next replica",
    )
    upstream_load_factor: float = Field(
        default=1.25,
        ge=1.0,
        description="affine routing: no replica takes a call past this times the mean in-flight",
    )
    upstream_max_inflight: int = Field(
        default=0, ge=0, description="calls one replica gets at once before spilling; 0: no limit"
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
    admin_token: str | None = Field(
        default=None,
        description="bearer token of the gateway's /admin endpoints; unset: they answer 403",
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

    # observability
    metrics_port: int = Field(
        default=0, description="worker Prometheus port (stages + Temporal SDK); 0: off"
    )
    metrics_host: str = Field(default="127.0.0.1", description="host of the worker metrics port")
    log_format: str = Field(default="json", description="json (JSON lines) or text")

    # embedded model backend (vLLM on CPU)
    vllm_port: int = Field(default=8000, description="port of the dev stack's vLLM")
    vllm_python: Path = Field(
        default_factory=lambda: checkout_path(".venv-vllm/bin/python"),
        description="python of the CPU vLLM venv; default: the checkout's .venv-vllm/bin/python "
        "(infra/setup.sh makes it)",
    )
    model_dir: Path | None = Field(
        default=None, description="HF model dir the dev vLLM serves; unset: the tiny model"
    )
    vllm_weight_reload: bool = Field(
        default=False,
        description="dev vLLM: enable its in-place weight reload (/collective_rpc, dev mode)",
    )

    source_roots: str | None = Field(
        default=None,
        description="comma-separated dirs a task may read host paths from (source.path, a "
        "local git url, upload src); unset: the worker's working directory",
    )

    # harness CLIs (codex, claude, qwen, pi) for runtimes that run them on the worker's host
    harness_bin_dir: Path = Field(
        default_factory=lambda: checkout_path("infra/harnesses/node_modules/.bin"),
        description="directory holding the harness CLI executables; default: the checkout's "
        "infra/harnesses/node_modules/.bin (infra/harnesses/install.sh)",
    )
    harness_python_dir: Path = Field(
        default_factory=lambda: checkout_path(".venv-harness/bin"),
        description="bin dir of the harnesses' own venv (openai, anthropic SDKs), first on a "
        "local session's PATH; default: the checkout's .venv-harness/bin (infra/setup.sh); "
        "never the worker's venv",
    )

    # local runtime isolation and the session's patch (issue 21)
    sandbox_uid_pool: str = Field(
        default="61000-61999",
        description="uid range (`FIRST-LAST`) of the local runtime's per-session users (a root "
        "worker): each session dir gets a uid of its own, created as `polar-h<uid>` when "
        "missing; uids held by another user are skipped",
    )
    max_patch_bytes: int = Field(
        default=64 << 20,
        ge=1,
        description="the largest patch of a session's changes the evaluator extracts (bytes); "
        "a bigger one is an extraction error (reward 0), never held in memory nor stored",
    )
    max_log_bytes: int = Field(
        default=4 << 20,
        ge=4096,
        description="most bytes the worker reads and stores of one log (a harness's stdout or "
        "stderr, a native log, an evaluator's or a test command's log): a longer one keeps its "
        "head and tail around a `truncated: N bytes dropped` note",
    )
    harbor_image_map: dict[str, str] = Field(
        default_factory=dict,
        description="Harbor tasks: image names (Dockerfile FROM, docker_image) -> local images, "
        "as a JSON object; a task's own [metadata.polar.image_map] wins (docs/harbor.md)",
    )
    # the gateway channel and what it records: caps, sizes, on-policy samples (issue 21)
    channel_max_connections: int = Field(
        default=64,
        ge=1,
        description="most connections one session's gateway channel holds at once; one more "
        "ends the session (its harness is killed, the reason in its log)",
    )
    channel_header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="how long a request's headers may take on a session's channel, from the "
        "connection's start or its last answer (408 and closed past it)",
    )
    channel_max_header_bytes: int = Field(
        default=64 * 1024, ge=1024, description="most bytes of one request's headers (431 past it)"
    )
    # egress: what a task asking for network gets (activities/runtimes/network/egress.py)
    egress: Literal["off", "proxy"] = Field(
        default="off",
        description="`off`: every session is sealed, and a task whose runtime.network is "
        "`public` or `allowlist` is refused at its start; `proxy`: such a task's harness gets "
        "a worker-side HTTP proxy enforcing its network (docs/threat-model.md, Egress)",
    )
    egress_blocked_networks: list[str] = Field(
        default_factory=lambda: list(DEFAULT_BLOCKED_NETWORKS),
        description="networks no egress reaches, whatever the task asks, checked on the "
        "address each name resolves to (JSON list; default: loopback, private, link-local, "
        "CGNAT, multicast, reserved, the metadata addresses); extra blocks: an address that "
        "is not global unicast (or an IPv6 spelling of one), or the worker host's own, is "
        "refused whatever this list says",
    )
    egress_exempt: list[str] = Field(
        default_factory=list,
        description="addresses or networks, each with an optional :port, that pass "
        "the egress blocks (JSON list; e.g. an internal package mirror); an address of the "
        "worker host's own passes only by an entry naming it, never by a network holding it",
    )
    egress_max_connections: int = Field(
        default=64,
        ge=1,
        description="most egress connections one session holds at once; one more ends the "
        "session (its harness is killed, the reason in its log)",
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

    def as_env(self) -> dict[str, str]:
        """The `POLAR_*` environment that gives a child process these settings (paths
        resolved, lists and dicts as JSON, as pydantic-settings reads them; None left out)."""
        out: dict[str, str] = {}
        for name, value in self.model_dump().items():
            if value is None:
                continue
            if isinstance(value, Path):
                value = value.resolve()
            elif isinstance(value, list | dict):
                value = json.dumps(value)
            out[f"POLAR_{name.upper()}"] = str(value)
        return out

    @field_validator("egress_blocked_networks", "egress_exempt")
    @classmethod
    def _valid_networks(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for entry in value:
            if info.field_name == "egress_exempt":
                parsed = parse_allowed_host(entry)
                if parsed.network is None:
                    raise ValueError(f"egress_exempt {entry!r}: an address or network, not a name")
            else:
                blocked_networks([entry])
        return value

    @field_validator("host_id")
    @classmethod
    def _safe_host_id(cls, value: str) -> str:
        # up to 253: a Kubernetes node name (a DNS subdomain; the chart's POLAR_HOST_ID)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}", value):
            raise ValueError(
                f"host_id {value!r}: 1-253 of letters, digits, '_', '.', '-' (a task queue name)"
            )
        return value

    @property
    def gateway_base_url(self) -> str:
        return self.gateway_url or f"http://{self.gateway_host}:{self.gateway_port}"

    @property
    def admin_base_url(self) -> str:
        """Where the gateway's admin listener answers (/admin, /metrics, /health, /docs)."""
        host = "127.0.0.1" if self.admin_host in ("0.0.0.0", "::") else self.admin_host
        return f"http://{host}:{self.admin_port}"

    @property
    def upstream_url_list(self) -> list[str]:
        return [u.strip().rstrip("/") for u in self.upstream_urls.split(",") if u.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment; secrets it leaves unset
    come from the data dir's dev stack, if one generated them (polar.credentials)."""
    from polar.credentials import with_dev_secrets

    return with_dev_secrets(Settings())

"""What only the worker reads: its host, pools and caps, the runtimes' sandbox and limits, the
harness CLIs, the gateway channel's caps and egress."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from polar.network_policy import DEFAULT_BLOCKED_NETWORKS, blocked_networks, parse_allowed_host
from polar.settings.base import checkout_path
from polar.settings.service import ServiceSettings
from polar.settings.temporal import TemporalSettings


class WorkerSettings(TemporalSettings, ServiceSettings):
    """The worker process's settings (`polar worker`)."""

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
    gpus: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="GPUs this host gives its container sessions (NVIDIA, through the engine's "
        "device requests / CDI); >0: the worker declares them on the deployment's GPU queue and "
        "sessions asking for GPUs are placed here (docs/runtimes.md, GPUs)",
    )
    gpu_types: list[str] = Field(
        default_factory=list,
        description='the types of this host\'s GPUs (JSON list, e.g. ["H100"]), matched '
        "against a task's gpu_types",
    )
    max_init: int = Field(default=8, description="per-worker cap of the init pool's activities")
    max_run: int = Field(default=8, description="per-worker cap of harness runs")
    max_postrun: int = Field(
        default=4, description="per-worker cap of the postrun pool (build, evaluate, score)"
    )
    metrics_port: int = Field(
        default=0, description="worker Prometheus port (stages + Temporal SDK); 0: off"
    )
    metrics_host: str = Field(default="127.0.0.1", description="host of the worker metrics port")
    source_roots: str | None = Field(
        default=None,
        description="comma-separated dirs a task may read host paths from (source.path, a "
        "local git url, upload src); unset: the worker's working directory",
    )
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

"""Where a session runs: the runtime spec, its sizes and workdir rules, and its network."""

from __future__ import annotations

import posixpath
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from polar.host_paths import FORBIDDEN_HOST_DIRS
from polar.network_policy import normalize_allowed_host
from polar.tasks.collect_spec import MAIN, CollectSpec
from polar.tasks.sidecar_spec import Condition, Healthcheck, check_dependencies
from polar.tasks.sources import PrepareAction
from polar.tasks.strict import MAX_TIMEOUT_S, StrictModel

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
MIN_SIZE, MAX_SIZE = 16 << 20, 1 << 50
"""Bounds of a container's memory and disk limits (16m to 1 PiB)."""


def parse_size(text: str) -> int:
    """Bytes in a docker-style size: `512`, `64m`, `4g` (binary units)."""
    match = re.fullmatch(r"([0-9]+)([bkmgBKMG]?)", text.strip())
    if match is None:
        raise ValueError(f"not a size: {text!r} (e.g. '512m', '4g')")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


DEFAULT_WORKDIR = "/workspace"
"""Where a container session's workspace is unless its RuntimeSpec says otherwise."""
FORBIDDEN_WORKDIRS = (*FORBIDDEN_HOST_DIRS, "/tmp", "/var/tmp", "/tests", "/logs", "/solution")
"""Container paths a workspace may not be at or under: system dirs (the sandbox's channel is
in /run), scratch space, and where a Harbor verifier's tests and logs go."""
TOO_BROAD_WORKDIRS = frozenset({"/home", "/var", "/opt", "/srv", "/mnt", "/media"})
"""Top-level dirs that may be above a workspace but never be one."""


HARNESS_USER_PATTERN = r"^(?:[0-9]{1,10}|[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?)$"
"""A user as `docker exec -u` / `podman exec --user` take it: a name of the image's
/etc/passwd, or a uid."""


def workdir_problem(path: str) -> str | None:
    """Why `path` may not be a container's workspace, or None: absolute, normalised (no
    `.`, `..`, `//` or trailing `/`), printable, not `/` nor at or under FORBIDDEN_WORKDIRS,
    not one of TOO_BROAD_WORKDIRS."""
    if not path.startswith("/"):
        return "is not absolute"
    if any(ord(c) < 32 or ord(c) == 127 for c in path) or len(path) > 255:
        return "has control characters or is over 255 characters"
    if path == "/":
        return "is the root directory"
    if posixpath.normpath(path) != path or path.startswith("//"):
        return f"is not normalised (write {posixpath.normpath(path)!r})"
    for top in FORBIDDEN_WORKDIRS:
        if path == top or path.startswith(top + "/"):
            return f"is in the system or reserved directory {top}"
    if path in TOO_BROAD_WORKDIRS:
        return "is a whole top-level directory (use a folder in it)"
    return None


LOCAL_HARNESS_USER = (
    "harness_user is for container runtimes (docker, podman): a 'local' session's harness "
    "runs as the worker's own unprivileged sandbox user, never a user of the task's choosing"
)


LOCAL_GPUS = (
    "gpus are for container runtimes (docker, podman) on a worker that declares them: a "
    "'local' session runs on the worker host without GPU isolation"
)


class NetworkSpec(StrictModel):
    """What a session may reach besides its gateway channel (docs/threat-model.md, Egress).

    `none` (default): the sealed session, no network at all. `public`: anything but the
    deployment's blocked networks (loopback, private, link-local, metadata...). `allowlist`:
    only `allowed_hosts` (host names, `*.domain` wildcards, IP addresses or CIDR networks,
    each with an optional `:port`). Either is served by the worker's egress proxy
    (activities/runtimes/network/egress.py) and only where the deployment turns it on
    (`POLAR_EGRESS=proxy`); elsewhere the session is refused at its start.
    """

    mode: Literal["none", "public", "allowlist"] = "none"
    allowed_hosts: list[str] = Field(default_factory=list, max_length=256)

    @field_validator("allowed_hosts")
    @classmethod
    def _valid_hosts(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(normalize_allowed_host(entry) for entry in v))

    @model_validator(mode="after")
    def _hosts_for_allowlist(self) -> NetworkSpec:
        if self.allowed_hosts and self.mode != "allowlist":
            raise ValueError(f"allowed_hosts is for mode 'allowlist', not {self.mode!r}")
        return self

    @property
    def sealed(self) -> bool:
        """No network at all: nothing to open."""
        return self.mode == "none"


MAX_SIDECARS = 8
"""The most services one session may have beside its container."""


class Sidecar(StrictModel):
    """A service beside a container session's own container (a Harbor task's compose
    service): it runs on the session's own private network, which has no way out and no
    host, and which its container joins; the session reaches it by `name`. Limited, labelled
    and removed with the session; never the harness's, which runs only in the session's own
    container. Started once the sidecars it `depends_on` meet their conditions; the
    session's container starts once it is ready: running, healthy where it has a
    `healthcheck`, exited 0 where a service waits for it to complete (polar/tasks/
    sidecar_spec.py)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    image: str = Field(min_length=1)
    command: list[str] | None = Field(default=None, description="the image's CMD if None")
    entrypoint: list[str] | None = Field(default=None, description="the image's if None")
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    cpus: float = Field(default=1.0, ge=0.1, le=64)
    memory: str = Field(default="1g", pattern=r"^[0-9]+[bkmgBKMG]?$")
    healthcheck: Healthcheck | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # left out when none: older workers read the spec
        description="its readiness probe; None: none (an image's own HEALTHCHECK is off)",
    )
    depends_on: dict[str, Condition] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,  # left out when none: older workers read the spec
        description="sidecars of the same runtime started, and meeting their condition, first",
    )

    @field_validator("memory")
    @classmethod
    def _sane_memory(cls, v: str) -> str:
        if not MIN_SIZE <= parse_size(v) <= MAX_SIZE:
            raise ValueError(f"{v!r} is not between 16m and {MAX_SIZE >> 30}g")
        return v


def check_collect_services(collect: CollectSpec, runtime: RuntimeSpec) -> None:
    """ValueError where `collect` is not for `runtime`: a `local` runtime (no container to
    copy out of), or a service that is neither `main` nor one of its sidecars."""
    if collect.empty:
        return
    if runtime.kind == "local":
        raise ValueError("collect (artifacts, collect commands) is for container runtimes")
    unknown = collect.services() - {s.name for s in runtime.sidecars} - {MAIN}
    if unknown:
        raise ValueError(
            f"collect names services that are not sidecars of the runtime: {sorted(unknown)}"
        )


class RuntimeSpec(StrictModel):
    """Where a session runs: a runtime `kind` by name, checked against the runtime registry
    where the runtimes are (activities/runtimes: the worker before it prepares, `polar
    submit` / `polar tasks load` before submitting), and what the kinds share.

    `local`: a trusted, dev-only work dir on the worker host, the harness as an
    unprivileged user in its own PID and network namespaces (zero setup, default).
    `docker`: one container per session from `image` (built locally, see
    infra/images/build.py), the source in /workspace, no network (its only way
    out is the session's gateway channel), CPU, memory, pids and disk limits by
    default, and a wall-clock budget after which the container stops.
    `podman`: the same container sessions with the daemonless `podman` CLI,
    rootless where the host allows (activities/runtimes/kinds/podman.py).
    `auto`: the best this worker's host offers, probed once per worker: docker where an
    engine answers, else podman where it can run as the worker, else `local` (sealed by
    bubblewrap on a worker that is not root; activities/runtimes/selection.py).
    `prepare` actions run after the source is in place, in every kind. The container
    fields (`image`, `cpus`, `memory`, `pids`, `disk`, `wall_clock_s`, `workdir`) are shared
    by docker and podman, so they stay here rather than under a kind's key.
    """

    kind: str = Field(
        default="local",
        min_length=1,
        description="a runtime kind the worker registers (activities/runtimes: local, docker, "
        "podman), or `auto`",
    )
    image: str = Field(default="polar/runtime:py311", description="docker: the image to run")
    cpus: float | None = Field(
        default=2.0, ge=0.1, le=512, description="containers: CPU limit (None: the default)"
    )
    memory: str | None = Field(
        default="4g", pattern=r"^[0-9]+[bkmgBKMG]?$", description="containers: memory, e.g. '2g'"
    )
    pids: int | None = Field(
        default=1024, ge=16, le=1_000_000, description="containers: process limit"
    )
    disk: str | None = Field(
        default="10g",
        pattern=r"^[0-9]+[bkmgBKMG]?$",
        description="containers: most bytes the session may write (its writable layer)",
    )
    wall_clock_s: float = Field(
        default=4 * 3600,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="docker: the container's whole lifetime",
    )
    prepare: list[PrepareAction] = Field(default_factory=list)
    workdir: str = Field(
        default=DEFAULT_WORKDIR,
        # left out at the default: older workers read the spec
        exclude_if=lambda v: v == DEFAULT_WORKDIR,
        description="containers: the workspace's absolute path in the container (the source "
        "goes there, the harness runs there, its changes there are graded); not `/` nor a "
        "system directory",
    )
    sidecars: list[Sidecar] = Field(
        default_factory=list,
        max_length=MAX_SIDECARS,
        exclude_if=lambda v: not v,  # left out when none: older workers read the spec
        description="containers: services beside the session's container, on its own private "
        "network (a Harbor task's compose services)",
    )
    depends_on: dict[str, Condition] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,  # left out when none: older workers read the spec
        description="containers: the sidecars the session's container waits for (compose's "
        "`main.depends_on`); it starts once every sidecar is ready whatever this says, and a "
        "`service_completed_successfully` one must have exited 0",
    )
    harness_user: str | None = Field(
        default=None,
        pattern=HARNESS_USER_PATTERN,
        # left out when unset: older workers read the spec
        exclude_if=lambda v: v is None,
        description="containers: the user the harness runs as (a name in the image's "
        "/etc/passwd, or a uid; Harbor's `[agent].user`); its HOME and scratch are given to "
        "it. None: the image's own user. Prepare actions and the evaluator run as the "
        "image's user; the workspace's ownership is the image's",
    )
    gpus: int = Field(
        default=0,
        ge=0,
        le=64,
        # left out when none: older workers read the spec
        exclude_if=lambda v: v == 0,
        description="containers: GPUs the session's container gets (Harbor's `gpus`); placed "
        "only on a worker that declares as many (POLAR_GPUS), refused at submit where none "
        "polls the deployment",
    )
    gpu_types: list[str] = Field(
        default_factory=list,
        max_length=16,
        exclude_if=lambda v: not v,
        description="GPU types any of which will do (e.g. ['H100', 'A100']; Harbor's "
        "`gpu_types`), matched against the worker's POLAR_GPU_TYPES; empty: any",
    )
    network: NetworkSpec = Field(
        default_factory=NetworkSpec,
        # left out while sealed: older workers read the spec
        exclude_if=lambda v: v.sealed,
        description="what the session may reach besides the gateway (default: nothing); "
        "`public` and `allowlist` need a worker with POLAR_EGRESS=proxy",
    )

    collect: CollectSpec = Field(
        default_factory=CollectSpec,
        exclude_if=lambda v: v.empty,  # left out when none: older workers read the spec
        description="containers: commands run and paths copied out of the session's "
        "container or its sidecars after the harness, kept as the session's artifacts and "
        "put back at their paths in the evaluator's fresh runtime (polar/tasks/collect_spec.py)",
    )

    @field_validator("memory", "disk")
    @classmethod
    def _sane_size(cls, v: str | None) -> str | None:
        if v is not None and not MIN_SIZE <= parse_size(v) <= MAX_SIZE:
            raise ValueError(f"{v!r} is not between 16m and {MAX_SIZE >> 30}g")
        return v

    @field_validator("workdir")
    @classmethod
    def _allowed_workdir(cls, v: str) -> str:
        problem = workdir_problem(v)
        if problem is not None:
            raise ValueError(f"workdir {v!r:.80} {problem}")
        return v

    @model_validator(mode="after")
    def _workdir_for_containers(self) -> RuntimeSpec:
        if self.kind == "local" and self.sidecars:
            raise ValueError("sidecars are for container runtimes (docker, podman)")
        names = [s.name for s in self.sidecars]
        if len(set(names)) != len(names):
            raise ValueError(f"sidecars: names must be unique, got {names}")
        check_dependencies(self.sidecars, self.depends_on)
        if self.kind == "local" and self.workdir != DEFAULT_WORKDIR:
            raise ValueError(
                f"workdir {self.workdir!r} is for container runtimes (docker, podman): a "
                "'local' session's workspace is a fresh dir on the worker host"
            )
        check_collect_services(self.collect, self)
        if self.kind == "local" and self.harness_user is not None:
            raise ValueError(LOCAL_HARNESS_USER)
        if self.kind == "local" and self.gpus:
            raise ValueError(LOCAL_GPUS)
        if self.gpu_types and not self.gpus:
            raise ValueError("gpu_types is for a session that asks for gpus (at least 1)")
        if any(not t.strip() or len(t) > 64 for t in self.gpu_types):
            raise ValueError("gpu_types: each a type name of 1-64 characters, e.g. 'H100'")
        return self

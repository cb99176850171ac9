"""Runtimes by kind: `local` (the zero-setup default), `docker`, `podman`, and `auto` (the
best this host offers: activities/runtimes/selection.py)."""

from __future__ import annotations

from pathlib import Path

from activities.runtimes.base import (
    InvalidRuntime,
    InvalidSource,
    PrepareFailed,
    Runtime,
    SourceUnavailable,
)
from activities.runtimes.local import LocalRuntime
from activities.runtimes.selection import concrete

__all__ = [
    "InvalidRuntime",
    "InvalidSource",
    "PrepareFailed",
    "Runtime",
    "SourceUnavailable",
    "get_runtime",
]


def get_runtime(
    kind: str,
    data_dir: Path,
    *,
    namespace: str | None = None,
    host_id: str | None = None,
    deployment: str | None = None,
) -> Runtime:
    """The runtime implementation for `kind`; a worker passes its `namespace` (its task
    queue: container names), `host_id` and `deployment` (labels its sweep finds). `auto`
    gives the kind this host offers (activities/runtimes/selection.py)."""
    kind = concrete(kind)
    if kind == "local":
        return LocalRuntime(data_dir / "runtimes", host_id=host_id)
    if kind == "docker":
        from activities.runtimes.docker import DockerRuntime  # the docker SDK only when used

        return DockerRuntime(
            data_dir / "runtimes", namespace=namespace, host_id=host_id, deployment=deployment
        )
    if kind == "podman":
        from activities.runtimes.podman import PodmanRuntime

        return PodmanRuntime(
            data_dir / "runtimes", namespace=namespace, host_id=host_id, deployment=deployment
        )
    raise ValueError(f"unknown runtime kind {kind!r}")

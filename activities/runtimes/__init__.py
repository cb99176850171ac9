"""Runtimes by kind: `local` (the zero-setup default), `docker` and `podman`."""

from __future__ import annotations

from pathlib import Path

from activities.runtimes.base import InvalidRuntime, InvalidSource, PrepareFailed, Runtime
from activities.runtimes.local import LocalRuntime

__all__ = ["InvalidRuntime", "InvalidSource", "PrepareFailed", "Runtime", "get_runtime"]


def get_runtime(kind: str, data_dir: Path) -> Runtime:
    """The runtime implementation for `kind`."""
    if kind == "local":
        return LocalRuntime(data_dir / "runtimes")
    if kind == "docker":
        from activities.runtimes.docker import DockerRuntime  # the docker SDK only when used

        return DockerRuntime(data_dir / "runtimes")
    if kind == "podman":
        from activities.runtimes.podman import PodmanRuntime

        return PodmanRuntime(data_dir / "runtimes")
    raise ValueError(f"unknown runtime kind {kind!r}")

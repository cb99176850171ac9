"""Runtimes by kind (`local` now; Docker and rootless ones plug in here)."""

from __future__ import annotations

from pathlib import Path

from activities.runtimes.base import InvalidSource, Runtime
from activities.runtimes.local import LocalRuntime

__all__ = ["InvalidSource", "Runtime", "get_runtime"]


def get_runtime(kind: str, data_dir: Path) -> Runtime:
    """The runtime implementation for `kind`."""
    if kind == "local":
        return LocalRuntime(data_dir / "runtimes")
    raise ValueError(f"unknown runtime kind {kind!r}")

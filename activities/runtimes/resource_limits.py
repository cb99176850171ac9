"""Container resource limits: the RuntimeSpec's values (on by default) in the engines' units."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from polar.tasks.spec import RuntimeSpec, parse_size

DISK_LABEL = "polar.disk-bytes"
"""Container label carrying the session's disk limit, for the watchdog of `run`."""

_DEFAULTS = RuntimeSpec.model_fields
__all__ = ["DISK_LABEL", "ContainerLimits", "parse_size", "writable_layer_bytes"]


@dataclass(frozen=True)
class ContainerLimits:
    """CPU, memory, processes and disk of one session container."""

    cpus: float
    memory_bytes: int
    pids: int
    disk_bytes: int

    @classmethod
    def of(cls, spec: RuntimeSpec) -> ContainerLimits:
        """The spec's limits; a field left None takes its default (limits are never off)."""
        return cls(
            cpus=spec.cpus or _DEFAULTS["cpus"].default,
            memory_bytes=parse_size(spec.memory or _DEFAULTS["memory"].default),
            pids=spec.pids or _DEFAULTS["pids"].default,
            disk_bytes=parse_size(spec.disk or _DEFAULTS["disk"].default),
        )


def writable_layer_bytes(root: Path, stop_after: int | None = None) -> int:
    """Bytes on disk (allocated blocks, so sparse files count what they use) under `root`;
    stops counting once past `stop_after`."""
    total = 0
    stack = [str(root)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
        if stop_after is not None and total > stop_after:
            break
    return total

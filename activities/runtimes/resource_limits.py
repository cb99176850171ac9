"""Container resource limits: the RuntimeSpec's values (on by default) in the engines' units,
and the disk watchdog of the `local` runtime (its sessions have no writable layer of their own
to cap: what its dirs hold together is checked while a command runs and after it)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from activities.shell_command import ProcessOutcome
from polar.tasks.spec import RuntimeSpec, parse_size

DISK_LABEL = "polar.disk-bytes"
"""Container label carrying the session's disk limit, for the watchdog of `run`."""

_DEFAULTS = RuntimeSpec.model_fields
__all__ = [
    "DISK_LABEL",
    "ContainerLimits",
    "DirsWatchdog",
    "parse_size",
    "watching_disk",
    "writable_layer_bytes",
]
SCAN_SHARE = 0.05
"""Most of the time a watchdog spends scanning (a big workspace is scanned less often)."""


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


def writable_layer_bytes(
    root: Path, stop_after: int | None = None, seen: set[tuple[int, int]] | None = None
) -> int:
    """Bytes on disk (allocated blocks, so sparse files count what they use) under `root`;
    stops counting once past `stop_after`. A file with several hard links counts once
    (`seen`: the (device, inode) pairs counted so far, shared across calls)."""
    seen = set() if seen is None else seen
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
                if st.st_nlink > 1 and not entry.is_dir(follow_symlinks=False):
                    key = (st.st_dev, st.st_ino)
                    if key in seen:
                        continue
                    seen.add(key)
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
        if stop_after is not None and total > stop_after:
            break
    return total


@dataclass
class DirsWatchdog:
    """Whether the dirs a session may write (workspace, home, scratch, tmp, venv) hold more
    than its disk limit together. The source it was given counts too; a scan that takes
    long is made less often (at most SCAN_SHARE of the time)."""

    roots: tuple[Path, ...]
    limit: int
    _next: float = field(default=0.0, repr=False)

    def exceeded(self, *, now: bool = False) -> str | None:
        """Why the dirs are past the limit (None: they are not, or not checked yet)."""
        started = time.monotonic()
        if not now and started < self._next:
            return None
        used = 0
        seen: set[tuple[int, int]] = set()  # hard links across the dirs count once too
        for root in self.roots:
            used += writable_layer_bytes(root, stop_after=self.limit - used, seen=seen)
            if used > self.limit:
                return f"disk limit exceeded: wrote more than {self.limit} bytes"
        took = time.monotonic() - started
        self._next = started + took / SCAN_SHARE
        return None


class _DiskExceeded(Exception):
    """Raised from a tick: run_shell then kills the command's process group."""


async def watching_disk(
    run: Callable[[Callable[[float], Awaitable[None]]], Awaitable[ProcessOutcome]],
    watchdog: DirsWatchdog,
    stderr: Path,
    on_tick: Callable[[float], Awaitable[None] | None] | None = None,
) -> ProcessOutcome:
    """`run(tick)` (a run_shell) with `watchdog` checked on every tick and once after: past
    the limit the command is killed (or, done already, its outcome says so), and the reason
    goes to its stderr log and `limit_exceeded`."""
    started = time.monotonic()

    async def tick(elapsed: float) -> None:
        exceeded = await asyncio.to_thread(watchdog.exceeded)
        if exceeded:
            raise _DiskExceeded(exceeded)
        if on_tick is not None:
            maybe = on_tick(elapsed)
            if maybe is not None:
                await maybe

    try:
        outcome = await run(tick)
    except _DiskExceeded as exc:
        with open(stderr, "a") as err:
            err.write(f"polar: {exc}; every process of the session killed\n")
        return ProcessOutcome(None, False, time.monotonic() - started, str(exc))
    exceeded = await asyncio.to_thread(watchdog.exceeded, now=True)
    if exceeded:  # written between the last tick and the exit
        with open(stderr, "a") as err:
            err.write(f"polar: {exceeded}\n")
        outcome.limit_exceeded = exceeded
    return outcome

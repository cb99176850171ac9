"""Process helpers shared by the dev stack and the runtimes."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
from collections.abc import Sequence


@functools.cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


def dying_with_parent(argv: Sequence[str]) -> list[str]:
    """`argv`, run so that it gets SIGKILL when this process dies (Linux): `setpriv
    --pdeathsig KILL -- argv` sets the signal and execs `argv` (same pid, no extra process).

    Not a `preexec_fn`: Python code between fork and exec can deadlock in a threaded
    process (a lock another thread held at the fork stays held in the child), which hung a
    worker's `evaluate` in CI. Without `setpriv`, `argv` unchanged."""
    setpriv = _setpriv()
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else list(argv)


def pids_with_env(entry: str) -> list[int]:
    """Live processes (other than this one) whose environment holds `entry` (`KEY=VALUE`).

    Reads /proc/PID/environ, the environment a process started with: a backstop
    for finding what a command left behind, not a guarantee (a process can
    rewrite it)."""
    wanted, mine = entry.encode(), os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == mine:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if wanted in fh.read().split(b"\0"):
                    found.append(int(name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def kill_pids(pids: list[int]) -> None:
    """SIGKILL each of `pids` (those already gone are skipped)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)

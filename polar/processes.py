"""Process helpers shared by the dev stack and the runtimes."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child between fork and exec: get SIGKILL when the parent process dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


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

"""Process helpers shared by the dev stack and the runtimes."""

from __future__ import annotations

import contextlib
import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child between fork and exec: get SIGKILL when the parent process dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

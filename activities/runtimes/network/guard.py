"""The caps on a session's doors out of its sandbox (the gateway channel, the egress socket).

A door counts its open connections at the accept (`Guard`): the first past
`ChannelLimits.max_connections` shuts it, and `run_until_shut` then ends the session's
harness. Over HTTP (the gateway relay) each request's headers must also come within
`header_timeout_s` and `max_header_bytes` (`GuardedHttp`, guarded_http.py: uvicorn's
protocol under the guard). A door's Unix socket is bound at any path length (`bind_unix`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from activities.shell_command import ProcessOutcome
from polar.settings import WorkerSettings

MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with its NUL


@dataclass(frozen=True)
class ChannelLimits:
    """What one session's channel may hold (POLAR_CHANNEL_*)."""

    max_connections: int = 64
    """open connections at once; one more ends the session"""
    header_timeout_s: float = 10.0
    """how long a request's headers may take, from the connection's start or last answer"""
    max_header_bytes: int = 64 * 1024
    """most bytes of one request's headers"""

    @classmethod
    def from_settings(cls, settings: WorkerSettings) -> ChannelLimits:
        return cls(
            max_connections=settings.channel_max_connections,
            header_timeout_s=settings.channel_header_timeout_s,
            max_header_bytes=settings.channel_max_header_bytes,
        )


class Guard:
    """The count of one relay's open connections, and its breach: the first connection past
    `max_connections` ends the session (`on_breach`); from then on every one is refused."""

    def __init__(
        self,
        limits: ChannelLimits,
        on_breach: Callable[[str], None],
        door: str = "gateway channel",
        setting: str = "POLAR_CHANNEL_MAX_CONNECTIONS",
    ) -> None:
        self.limits = limits
        self.open = 0
        self.header_timeouts = 0
        self.breach: str | None = None
        self._on_breach = on_breach
        self._door = f"its {door} ({setting})"

    def admit(self) -> bool:
        if self.breach is None and self.open >= self.limits.max_connections:
            self.breach = (
                f"the session opened more than {self.limits.max_connections} connections at "
                f"once on {self._door}"
            )
            self._on_breach(self.breach)
        if self.breach is not None:
            return False
        self.open += 1
        return True


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket at `path`, however long the path (sun_path holds 107 bytes:
    a longer one is bound through an O_PATH descriptor of its directory)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dir_fd = None
    try:
        if len(str(path).encode()) <= MAX_SOCKET_PATH:
            sock.bind(str(path))
        else:
            dir_fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
            sock.bind(f"/proc/self/fd/{dir_fd}/{path.name}")
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    return sock


async def run_until_shut(
    run: Awaitable[ProcessOutcome], shut: asyncio.Event, why: Callable[[], str], stderr: Path
) -> ProcessOutcome:
    """`run` (a harness), ended if `shut` is set first (a door of its session passed a cap):
    then it is cancelled (the runtime kills its processes) and the outcome says `why()`, as
    does a line on `stderr`."""
    started = time.monotonic()
    running = asyncio.ensure_future(run)
    shutting = asyncio.ensure_future(shut.wait())
    try:
        await asyncio.wait({running, shutting}, return_when=asyncio.FIRST_COMPLETED)
        if running.done():
            return running.result()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    except BaseException:
        running.cancel()
        with contextlib.suppress(BaseException):
            await running
        raise
    finally:
        shutting.cancel()
    reason = why()
    stderr.parent.mkdir(parents=True, exist_ok=True)
    with open(stderr, "a") as err:
        err.write(f"polar: {reason}; every process of the session killed\n")
    return ProcessOutcome(None, False, time.monotonic() - started, reason)

"""Heartbeats for long activities: one helper, on its own timer, with progress details.

A worker that dies is noticed by the heartbeat timeout, so every call that can
outlast it (a `git clone`, a container start, copying a big tree, listing S3)
runs inside a `Heartbeater`:

    async with Heartbeater(step="loading completions") as hb:
        records = await asyncio.to_thread(load, on_read=lambda done, total:
                                          hb.update(done=done, total=total))

    handle = await heartbeating(runtime.prepare(request), step="preparing")

It beats once on entry, then every `every_s` with its details (the latest
`update`, what `progress()` returns, `elapsed_s`). An activity's first moments
(`QUIET_S`, at most a quarter of its heartbeat timeout) send nothing: every
heartbeat the SDK sends is a write on the server, and most stages of a short
session end within a second; a heartbeater that is still running then beats
with its latest details. `update` may be called from
a worker thread. Nested heartbeaters: the innermost one beats (with its
parent's details under its own), the outer one waits until it is done, so
the details a heartbeat carries are always the most specific. Outside an
activity (a unit test, a script) nothing is sent: no error.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from temporalio import activity

T = TypeVar("T")

HEARTBEAT_EVERY_S = 2.0
"""Seconds between heartbeats: well under any heartbeat timeout a stage gets (the SDK
throttles what it sends to the server anyway)."""

QUIET_S = 1.0
"""How long an activity runs before its first heartbeat is sent (less where a quarter of
its heartbeat timeout is shorter)."""

_innermost: contextvars.ContextVar[Heartbeater | None] = contextvars.ContextVar(
    "polar_heartbeater", default=None
)
_activity_started: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "polar_activity_started", default=None
)


def mark_activity_start() -> None:
    """Called as an activity starts (the worker's interceptor): its quiet time starts now."""
    _activity_started.set(time.monotonic())


def quiet_left() -> float:
    """Seconds of the current activity's quiet start still to go (0 when it is over, when
    outside an activity, or when its start was not marked)."""
    started = _activity_started.get()
    if started is None or not activity.in_activity():
        return 0.0
    quiet = QUIET_S
    timeout = activity.info().heartbeat_timeout
    if timeout:
        quiet = min(quiet, timeout.total_seconds() / 4)
    return max(0.0, started + quiet - time.monotonic())


def heartbeat(**details: object) -> None:
    """One heartbeat now with `details`; nothing outside an activity, nor in its quiet start
    (a step that outlasts it beats again: a Heartbeater, a process's ticks)."""
    if activity.in_activity() and quiet_left() == 0:
        activity.heartbeat(details)


class Heartbeater:
    """Heartbeat on a timer while a block runs, with the latest progress details."""

    def __init__(
        self,
        every_s: float = HEARTBEAT_EVERY_S,
        progress: Callable[[], Mapping[str, object]] | None = None,
        **details: object,
    ) -> None:
        self.every_s = every_s
        self.progress = progress
        self.details: dict[str, object] = dict(details)
        self._parent: Heartbeater | None = None
        self._children = 0
        self._started = time.monotonic()
        self._timer: asyncio.Task[None] | None = None
        self._token: contextvars.Token[Heartbeater | None] | None = None

    def update(self, **details: object) -> None:
        """Details for the next heartbeat (merged into those given so far)."""
        self.details.update(details)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    def current_details(self) -> dict[str, Any]:
        """What the next heartbeat carries: the parent's details, then this one's, its
        progress and the seconds since it started."""
        merged: dict[str, Any] = self._parent.current_details() if self._parent else {}
        merged.update(self.details)
        if self.progress is not None:
            merged.update(self.progress())
        merged["elapsed_s"] = round(self.elapsed_s, 1)
        return merged

    def beat(self) -> None:
        """Heartbeat now (nothing outside an activity, in its quiet start, nor while a nested
        one is active)."""
        if self._children == 0 and activity.in_activity() and quiet_left() == 0:
            activity.heartbeat(self.current_details())

    async def __aenter__(self) -> Heartbeater:
        self._started = time.monotonic()
        self._parent = _innermost.get()
        if self._parent is not None:
            self._parent._children += 1
        self._token = _innermost.set(self)
        self.beat()
        if activity.in_activity():
            self._timer = asyncio.create_task(self._tick(), name="heartbeater")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # the bookkeeping first: a cancel that lands while the timer is awaited below must not
        # leave the parent muted (its `_children` count up) for the rest of the activity
        if self._token is not None:
            _innermost.reset(self._token)
            self._token = None
        if self._parent is not None:
            self._parent._children -= 1
            self._parent = None
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None

    async def _tick(self) -> None:
        quiet = quiet_left()
        if quiet > 0:  # the entry beat was held back: the first one when the quiet time ends
            await asyncio.sleep(quiet)
            self.beat()
        while True:
            await asyncio.sleep(self.every_s)
            self.beat()


async def heartbeating(
    work: Awaitable[T],
    every_s: float = HEARTBEAT_EVERY_S,
    progress: Callable[[], Mapping[str, object]] | None = None,
    **details: object,
) -> T:
    """Await `work` inside a `Heartbeater(every_s, progress, **details)`."""
    async with Heartbeater(every_s, progress, **details):
        return await work

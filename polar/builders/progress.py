"""Progress of a build: builders report it, whoever runs them (the build activity) listens.

A builder is a plain function of the records; the listener is set around the
call (`listening`) in a context variable, so concurrent builds in one worker
each report to their own listener, and `asyncio.to_thread` carries it into
the builder's thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

ProgressListener = Callable[[int, int], None]
"""Called with (calls built, calls to build)."""

_listener: ContextVar[ProgressListener | None] = ContextVar("polar_build_progress", default=None)


def report_progress(done: int, total: int) -> None:
    """Tell the listener of the current build (if any) that `done` of `total` calls are built."""
    listener = _listener.get()
    if listener is not None:
        listener(done, total)


@contextmanager
def listening(listener: ProgressListener) -> Iterator[None]:
    """Send the progress builders report inside this block (and threads started from it by
    `asyncio.to_thread`) to `listener`."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)

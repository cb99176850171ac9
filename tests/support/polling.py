"""The one way a test waits for a condition: poll it until true, fail naming it after a deadline.

`wait_for` awaits (a plain or an async predicate); `wait_until` is the same for code that is not
async (fixtures starting a server or a process). A predicate may raise to stop waiting at once
(a process that died, say).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def wait_for(predicate: Any, timeout_s: float, what: str, every_s: float = 0.2) -> None:
    """Poll `predicate` (plain or async) until true; AssertionError naming `what` after
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        outcome = predicate()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return
        await asyncio.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def wait_until(
    predicate: Callable[[], object], timeout_s: float, what: str, every_s: float = 0.2
) -> None:
    """`wait_for` for code that is not async: poll `predicate` until true; AssertionError naming
    `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")

"""Run a shell command as a child process: time budget, ticks for heartbeats, clean kill.

The child gets its own process group (so a kill reaches everything it
started) and is tied to the worker with PR_SET_PDEATHSIG, so a worker that
dies does not leave a harness running and calling the gateway. A runtime may
`wrap` the command in a sandbox (activities/runtimes/sandboxes/local_sandbox.py), whose
own teardown then reaches what left the process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from polar.processes import dying_with_parent


@dataclass
class ProcessOutcome:
    exit_code: int | None
    timed_out: bool
    duration_s: float
    limit_exceeded: str | None = None
    """Why the runtime killed the command for breaking a resource limit (e.g. disk)."""


async def run_shell(
    command: str,
    *,
    cwd: Path,
    env: dict[str, str],
    stdout: Path,
    stderr: Path,
    timeout_s: float,
    on_tick: Callable[[float], Awaitable[None] | None] | None = None,
    tick_s: float = 2.0,
    wrap: Sequence[str] = (),
    pass_fds: Sequence[int] = (),
) -> ProcessOutcome:
    """Run `command` with bash (after the argv prefix `wrap`); kill its process group at
    `timeout_s` or on cancellation, ticking all the while. `pass_fds`: descriptors of the
    worker's the command inherits, at the same numbers (every other one is closed in it)."""
    stdout.parent.mkdir(parents=True, exist_ok=True)
    stderr.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(stdout, "ab") as out, open(stderr, "ab") as err:
        proc = await asyncio.create_subprocess_exec(
            *dying_with_parent([*wrap, "bash", "-c", command]),
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=err,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )

        async def tick() -> None:
            if on_tick is not None:
                maybe = on_tick(time.monotonic() - started)
                if maybe is not None:
                    await maybe

        try:
            while True:
                elapsed = time.monotonic() - started
                remaining = timeout_s - elapsed
                if remaining <= 0:
                    await _kill_group(proc, tick, tick_s)
                    return ProcessOutcome(None, True, time.monotonic() - started)
                try:
                    code = await asyncio.wait_for(proc.wait(), timeout=min(tick_s, remaining))
                    return ProcessOutcome(code, False, time.monotonic() - started)
                except TimeoutError:
                    await tick()
        except BaseException:
            await _kill_group(proc, None, tick_s)
            raise


async def _kill_group(
    proc: asyncio.subprocess.Process,
    tick: Callable[[], Awaitable[None]] | None,
    tick_s: float,
) -> None:
    """SIGTERM the group, then SIGKILL after a grace period; `tick` every `tick_s` meanwhile."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + grace
        while (left := deadline - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(proc.wait(), timeout=min(tick_s, left))
                return
            except TimeoutError:
                if tick is not None:
                    await tick()

"""What every evaluator shares: its outcome, its errors, one command in a runtime."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from activities.runtimes.base import Runtime
from polar.contracts import RuntimeHandle

Tick = Callable[[float], Awaitable[None] | None] | None
T = TypeVar("T")


async def while_ticking(work: Awaitable[T], on_tick: Tick, every_s: float = 2.0) -> T:
    """Await `work`, calling `on_tick(elapsed)` every `every_s` meanwhile (an activity's
    heartbeat: long work must not look like a dead worker)."""
    task = asyncio.ensure_future(work)
    started = time.monotonic()
    while True:
        done, _ = await asyncio.wait({task}, timeout=every_s)
        if done:
            return task.result()
        if on_tick is not None:
            ticked = on_tick(time.monotonic() - started)
            if ticked is not None:
                await ticked


# git must not read anything the harness may have left in the repo's config; safe.directory
# because the workspace may belong to another user than the one grading it
GIT = (
    "git -c safe.directory=* -c core.quotepath=false -c core.fsmonitor=false "
    "-c core.hooksPath=/dev/null -c diff.noprefix=false -c diff.mnemonicprefix=false "
    "-c color.ui=false"
)
# git stops looking for a repository at the workspace (a workspace without .git must not
# find one in a folder above it)
NO_GIT_ABOVE = 'export GIT_CEILING_DIRECTORIES="$(dirname "$(pwd -P)")"'


class EvaluatorError(RuntimeError):
    """The task cannot be graded (its instance or its evaluator is broken, not the session):
    the session fails instead of getting a reward."""


@dataclass
class Evaluation:
    """An evaluator's outcome; `report` (JSON) and `patch` are kept as artifacts."""

    reward: float
    detail: str
    trace_rewards: dict[str, float] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    patch: bytes = b""


async def run_in(
    runtime: Runtime,
    handle: RuntimeHandle,
    command: str,
    log_name: str,
    timeout_s: float,
    on_tick: Tick = None,
    env: dict[str, str] | None = None,
) -> tuple[int | None, bool, str]:
    """(exit code, timed out, stdout+stderr) of one command in a runtime; a command that broke
    a resource limit (e.g. a patch that writes past the disk limit) has no exit code."""
    outcome = await runtime.run(
        handle, command, env=env or {}, log_name=log_name, timeout_s=timeout_s, on_tick=on_tick
    )
    text = ""
    for path in runtime.log_paths(handle, log_name):
        if path.exists():
            text += path.read_text(errors="replace")
    if outcome.limit_exceeded:
        return None, outcome.timed_out, f"{text}\n{outcome.limit_exceeded}"
    return outcome.exit_code, outcome.timed_out, text


async def reap(runtime: Runtime, handle: RuntimeHandle) -> None:
    """Kill what a command left running in the runtime, before reading what it wrote
    (a runtime without `reap` yet is skipped)."""
    kill = getattr(runtime, "reap", None)
    if callable(kill):
        await kill(handle)

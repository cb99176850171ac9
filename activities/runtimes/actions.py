"""Prepare actions (upload a file or folder, run a command with retries), for every runtime."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from activities import safe_files
from activities.heartbeat import Heartbeater
from activities.runtimes.base import InvalidRuntime, PrepareFailed, Runtime
from polar.contracts import RuntimeHandle
from polar.host_paths import resolved_problem
from polar.tasks.spec import CommandAction, PrepareAction, UploadAction


async def run_prepare_actions(
    runtime: Runtime,
    handle: RuntimeHandle,
    actions: list[PrepareAction],
    upload: Callable[[Path, str], Awaitable[None]],
    forbidden: tuple[Path, ...] = (),
) -> None:
    """Run `actions` in order; `upload(src, dest)` is the runtime's own copy-in. An upload's
    `src` is checked once resolved: never / or a system directory (polar/host_paths.py), nor
    under `forbidden` (the runtime's own session dirs)."""
    for index, action in enumerate(actions):
        if isinstance(action, UploadAction):
            src = Path(action.src)
            problem = resolved_problem(src, forbidden)
            if problem is not None:
                raise InvalidRuntime(f"prepare upload: src {src} {problem}")
            if not src.exists():
                raise InvalidRuntime(f"prepare upload: {src} does not exist")
            async with Heartbeater(step="prepare upload", action=index):
                await upload(src, action.dest)
        elif isinstance(action, CommandAction):
            await _run_with_retries(runtime, handle, index, action)


async def _run_with_retries(
    runtime: Runtime, handle: RuntimeHandle, index: int, action: CommandAction
) -> None:
    async with Heartbeater(step="prepare action", action=index) as hb:
        for attempt in range(action.retries + 1):
            hb.update(attempt=attempt)
            log_name = f"prepare-{index}-try{attempt}"
            outcome = await runtime.run(
                handle,
                action.command,
                env=action.env,
                log_name=log_name,
                timeout_s=action.timeout_s,
            )
            if outcome.exit_code == 0 and not outcome.timed_out:
                return
    stderr = runtime.log_paths(handle, log_name)[1]
    tail = safe_files.read_log_file(stderr, limit=4096).decode(errors="replace")[-1500:]
    why = "timed out" if outcome.timed_out else f"exited {outcome.exit_code}"
    raise PrepareFailed(
        f"prepare action {index} ({action.command!r}) {why} after "
        f"{action.retries + 1} attempt(s): {tail}"
    )

"""Prepare actions (upload a file or folder, run a command with retries), for every runtime:
at prepare (each kind's own copy-in) and in a runtime already prepared (`run_in_place`, a
step's actions: uploads through its scratch)."""

from __future__ import annotations

import asyncio
import secrets
import shlex
import shutil
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


UPLOAD_TIMEOUT_S = 300.0
"""The most a copy from scratch into place may take."""


async def run_in_place(
    runtime: Runtime,
    handle: RuntimeHandle,
    actions: list[PrepareAction],
    forbidden: tuple[Path, ...] = (),
) -> None:
    """`actions` in a runtime already prepared (a multi-step task's step, before its
    harness): an upload is staged in the runtime's scratch under a name nothing there could
    know in advance, then copied into place by a command in the runtime (a folder's files
    merged into `dest`, as at prepare); PrepareFailed where a copy or a command fails."""

    async def upload(src: Path, dest: str) -> None:
        staged = runtime.scratch(handle) / f"upload-{secrets.token_hex(16)}"
        folder = src.is_dir()
        if folder:
            await asyncio.to_thread(shutil.copytree, src, staged, symlinks=True)
        else:
            await asyncio.to_thread(shutil.copy2, src, staged)
        target, here = shlex.quote(dest), shlex.quote(str(staged))
        copy = (
            f"mkdir -p {target} && cp -a {here}/. {target}/"
            if folder
            else f'mkdir -p "$(dirname {target})" && cp -a {here} {target}'
        )
        try:
            outcome = await runtime.run(
                handle, copy, env={}, log_name="upload", timeout_s=UPLOAD_TIMEOUT_S
            )
        finally:
            await asyncio.to_thread(_remove, staged)
        if outcome.exit_code != 0 or outcome.timed_out:
            stderr = runtime.log_paths(handle, "upload")[1]
            tail = safe_files.read_log_file(stderr, limit=4096).decode(errors="replace")
            raise PrepareFailed(f"upload of {src} to {dest} failed: {tail[-500:]}")

    await run_prepare_actions(runtime, handle, actions, upload, forbidden)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)

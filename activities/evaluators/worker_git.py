"""The workspace's git in a container, made by the worker's own git: a task's image needs none.

A container runtime (a `WorkspaceWriter`, activities/runtimes/base.py) never runs git in its
container. Its workspace is copied out (`copy_workspace`: the engine's archive, nothing run
in the container), and the worker's git works on that copy, in a folder of the worker's
that no sandbox reaches (under `{data_dir}/worker-git/`):

* the baseline (`baseline_on_worker`): the same script as in a sandbox
  (activities/evaluators/baseline.py), so the same source has the same baseline id; then
  what it wrote into the copy's `.git` (the whole `.git` of a workspace that had none, else
  the new objects and the baseline ref) is put back into the workspace, owned as the
  workspace is: the harness sees the same repository as before;
* an evaluator's git work in its fresh runtime (`copy_into`; activities/evaluators/
  workspace_git.py: checking the base commit, listing and restoring files, applying the
  session's patch and a test patch): on one copy, what changed put back into the
  workspace. GNU `patch` (the in-sandbox last resort) never runs on the worker over a
  session's patch.

Git on the copy reads nothing of the task's: the copy's `.git/config` is replaced by one
of the worker's (keeping only the object format), its `info/` and `hooks/` removed, and git
runs with no system or global config (`CLEAN_GIT_ENV`), no hooks and no attributes file, so
a filter, a hook or an fsmonitor the image or a prepare step left never runs here. A `.git`
that is a file (a worktree's or a submodule's link) cannot be followed on the worker: the
baseline fails, naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from activities import safe_files
from activities.evaluators.base import Tick
from activities.evaluators.patches import CLEAN_GIT_ENV, trusted_env
from activities.heartbeat import heartbeating
from activities.runtimes.base import Runtime, WorkspaceWriter
from activities.shell_command import run_shell
from polar.contracts import RuntimeHandle
from polar.settings import WorkerSettings, get_settings


class WorkerGitFailed(RuntimeError):
    """The worker's git could not do its part on the copy (the message says why)."""


def uses_worker_git(runtime: Runtime) -> bool:
    """Whether `runtime`'s workspace git is the worker's (a container runtime)."""
    return isinstance(runtime, WorkspaceWriter)


@contextlib.asynccontextmanager
async def workspace_copy(runtime: Runtime, handle: RuntimeHandle) -> AsyncIterator[Path]:
    """A copy of the workspace in a 0700 folder of the worker's, its `.git` made safe for the
    worker's git; removed after."""
    parent = get_settings(WorkerSettings).data_dir / "worker-git"
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{handle.session_id}-", dir=parent))
    try:
        copy = folder / "workspace"
        copy.mkdir()
        await copy_into(runtime, handle, copy)
        yield copy
    finally:
        await asyncio.to_thread(shutil.rmtree, folder, True)


async def copy_into(runtime: Runtime, handle: RuntimeHandle, copy: Path) -> None:
    """The workspace copied into the worker's empty folder `copy` (its parent the worker's
    own, 0700), its `.git` made safe for the worker's git (WorkerGitFailed where it cannot
    be)."""
    await heartbeating(runtime.copy_workspace(handle, copy), step="copying the workspace")
    await asyncio.to_thread(_tame_git, copy / ".git")


def _tame_git(git: Path) -> None:
    """The copy's `.git` with a config of the worker's (the object format kept), no info/
    nor hooks; WorkerGitFailed where it is a file (a link to a git dir elsewhere)."""
    if not git.exists() and not git.is_symlink():
        return
    if git.is_symlink() or not git.is_dir():
        raise WorkerGitFailed(
            "the workspace's .git is not a directory (a worktree's or submodule's link, "
            "which the worker cannot follow): make it a repository of its own"
        )
    fmt = ""
    config = git / "config"
    if config.is_file() and not config.is_symlink():
        found = subprocess.run(
            ["git", "config", "-f", str(config), "--get", "extensions.objectformat"],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "GIT_CONFIG_NOSYSTEM": "1"},
        )
        fmt = found.stdout.strip() if found.returncode == 0 else ""
    for name in ("info", "hooks", "config", "commondir"):
        path = git / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    text = f"[core]\n\trepositoryformatversion = {1 if fmt else 0}\n\tbare = false\n"
    if fmt:
        text += f"[extensions]\n\tobjectformat = {fmt}\n"
    config.write_text(text)


def _entries(top: Path) -> set[str]:
    """Every dir, file and link below `top`, relative."""
    found: set[str] = set()
    for folder, dirs, files in os.walk(top):
        rel = os.path.relpath(folder, top)
        for name in dirs + files:
            found.add(name if rel == "." else f"{rel}/{name}")
    return found


async def _run_git(
    copy: Path, script: str, env: dict[str, str], timeout_s: float, tick: Tick
) -> tuple[int | None, str]:
    """(exit code, output) of `script` (bash) run in the copy with the worker's git."""
    folder = copy.parent
    logs = folder / "git.stdout", folder / "git.stderr"
    for log in logs:
        log.unlink(missing_ok=True)
    outcome = await run_shell(
        f"{CLEAN_GIT_ENV}\n{script}",
        cwd=copy,
        env=trusted_env(folder) | env,
        stdout=logs[0],
        stderr=logs[1],
        timeout_s=timeout_s,
        on_tick=tick,
    )
    text = b"".join(safe_files.read_log_file(p, limit=64_000) for p in logs)
    return outcome.exit_code, text.decode(errors="replace")


async def baseline_on_worker(
    runtime: Runtime,
    handle: RuntimeHandle,
    script: Callable[[str], str],
    env: dict[str, str],
    timeout_s: float,
    tick: Tick,
) -> tuple[int | None, str]:
    """Run the baseline `script(index)` (`index`: a path for its temporary index) on a copy
    of the workspace with the worker's git, and put what it wrote into the copy's `.git`
    back into the workspace: (exit code, output)."""
    assert isinstance(runtime, WorkspaceWriter)
    async with workspace_copy(runtime, handle) as copy:
        git = copy / ".git"
        before = {f".git/{p}" for p in _entries(git)} if git.is_dir() else set()
        fresh = not before
        index = str(copy.parent / "baseline.index")
        code, output = await _run_git(copy, script(index), env, timeout_s, tick)
        if code != 0:
            return code, output
        after = {f".git/{p}" for p in _entries(git)}
        new = sorted(after - before) if not fresh else sorted(after | {".git"})
        ref = ".git/refs/polar/baseline"
        if not fresh and (copy / ref).is_file() and ref not in new:
            new.append(ref)
        await runtime.put_workspace(handle, copy, new, [])
        return code, output

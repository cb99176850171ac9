"""The git work of an evaluator in its fresh runtime, wherever that git runs: one interface.

An evaluator checks that its workspace holds the base commit, lists files at a commit,
reads a file's content at base beside its current one, puts files back to base, removes
files and applies patches. `workspace_git(runtime, handle)` gives the `WorkspaceGit` that
does it for that runtime:

* `RuntimeGit` (the local runtime and its kin): the runtime's own git, through
  `Runtime.run`, its outputs through `Runtime.scratch` (the host's git, checked at prepare);
* `CopyGit` (a container, a `WorkspaceWriter`): the worker's own git on one copy of the
  workspace, made when first needed and kept until the context ends, its `.git` tamed as
  worker_git.py does (the worker's config, no info/ nor hooks, no system or global config),
  whose changes are put back into the workspace as data (`put_workspace`): the task's
  image needs no git, and nothing of the image runs.

Once the session's changes are applied, the copy holds what the session wrote (links
included), so on the copy git only reads objects (`cat-file`, `ls-tree`, `show`) or writes
through its own checkout and apply (which never write beyond a link); every other file
operation (removing, reading a current file, choosing what to put back) is the worker's
own and never follows a link (activities/safe_files.py): an entry beyond a link in the
copy is neither read nor put back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from activities import safe_files
from activities.evaluators.base import GIT, NO_GIT_ABOVE, EvaluatorError, Tick, run_in
from activities.evaluators.patches import (
    APPLY_STRATEGIES,
    CLEAN_GIT,
    _clean_keeps_junk,
    apply_patch,
    resolve_commit,
    revision,
    split_patch,
)
from activities.evaluators.worker_git import (
    WorkerGitFailed,
    _run_git,
    copy_into,
    uses_worker_git,
)
from activities.runtimes.base import Runtime, WorkspaceWriter
from polar.contracts import RuntimeHandle
from polar.settings import WorkerSettings, get_settings

__all__ = [
    "Content",
    "CopyGit",
    "RuntimeGit",
    "WorkspaceGit",
    "restore_command",
    "versions_command",
    "workspace_git",
]

Content = bytes | str | None
"""A file's content: its bytes, None where it is absent, or why it was not read (a link,
not a regular file)."""

WORKER_STRATEGIES = tuple((n, t) for n, t in APPLY_STRATEGIES if n.startswith("git apply"))
"""The apply strategies run on the worker: git's only (GNU `patch` never runs on the worker
over a session's patch)."""


class WorkspaceGit(Protocol):
    """The evaluator runtime's workspace git (`workspace_git`)."""

    out: Path
    """A folder of the worker's that `read_only` scripts write their files to, named by the
    same path in the scripts; read it with safe_files."""

    async def read_only(
        self, script: str, log_name: str, timeout_s: float = 120
    ) -> tuple[int | None, str]:
        """(exit code, output) of a shell `script` run in the workspace that changes nothing
        there (git reading objects: `rev-parse`, `cat-file`, `ls-tree`, `show`)."""
        ...

    async def versions(self, base: str, files: Sequence[str]) -> list[tuple[Content, Content]]:
        """(content at commit `base`, content now) of each of `files`."""
        ...

    async def restore(
        self, base: str, files: Sequence[str], log_name: str, timeout_s: float = 120
    ) -> tuple[int | None, str]:
        """Put each of `files` back as it is at commit `base` (checked out from it), or remove
        it (recursively) where `base` has none: (exit code, output)."""
        ...

    async def remove(self, files: Sequence[str], log_name: str) -> tuple[int | None, str]:
        """Remove each of `files`: (exit code, output)."""
        ...

    async def apply(
        self,
        patch: bytes,
        *,
        name: str,
        reset_to: str,
        timeout_s: float,
        strategies: Sequence[tuple[str, str]] = APPLY_STRATEGIES,
        on_tick: Tick = None,
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """Apply `patch` (`patches.apply_patch`'s strategies, the workspace reset to commit
        `reset_to` between tries): (strategy that worked or None, attempts)."""
        ...


@contextlib.asynccontextmanager
async def workspace_git(runtime: Runtime, handle: RuntimeHandle) -> AsyncIterator[WorkspaceGit]:
    """The WorkspaceGit of `runtime`'s workspace `handle` (a container's copy removed after)."""
    if not uses_worker_git(runtime):
        yield RuntimeGit(runtime, handle)
        return
    parent = get_settings(WorkerSettings).data_dir / "worker-git"
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{handle.session_id}-", dir=parent))  # 0700
    try:
        yield CopyGit(runtime, handle, folder)
    finally:
        await asyncio.to_thread(shutil.rmtree, folder, True)


# --------------------------------------------------------------------------- commands


def restore_command(base: str, files: Sequence[str], absent: Path | None = None) -> str:
    """The command that puts each of `files` back to commit `base` (git's checkout, which
    never writes beyond a link), or removes it where `base` has no such file; with `absent`,
    instead of removing it, writes its index in `files` there (one a line)."""
    into = shlex.quote(str(absent)) if absent is not None else ""
    lines = [f"rm -f {into}"] if absent is not None else []
    lines.append(resolve_commit(base))
    for i, f in enumerate(files):
        q = shlex.quote(f)
        gone = f"echo {i} >> {into}" if absent is not None else f"rm -rf -- {q}"
        lines.append(
            f'if {GIT} cat-file -e --end-of-options "$commit":{q} 2>/dev/null; '
            f'then {GIT} checkout "$commit" -- {q}; else {gone}; fi'
        )
    return "\n".join(lines)


def versions_command(base: str, files: Sequence[str], out: Path, *, current: bool = True) -> str:
    """The command that copies each of `files` into `out` as `<i>.base` (its content at
    commit `base`, absent where it had none) and, with `current`, `<i>.new` (the
    workspace's, if any)."""
    lines = [f"rm -rf {shlex.quote(str(out))}", f"mkdir -p {shlex.quote(str(out))}"]
    for i, f in enumerate(files):
        q, dest = shlex.quote(f), shlex.quote(str(out / str(i)))
        lines.append(
            f"{GIT} show {revision(base, ':' + q)} > {dest}.base 2>/dev/null || rm -f {dest}.base"
        )
        if current:
            lines.append(f"if [ -f {q} ]; then cat -- {q} > {dest}.new; fi")
    return "\n".join(lines)


def _read(folder: Path, name: str, limit: int) -> Content:
    try:
        return safe_files.read_bytes(folder, name, limit=limit)
    except safe_files.UnsafePath as exc:
        return str(exc)


VERSION_LIMIT = 16 << 20
"""At most this much of a file's content is read for `versions`."""


# --------------------------------------------------------------------------- in the runtime


class RuntimeGit:
    """The runtime's own git, through `Runtime.run`; outputs through its scratch."""

    def __init__(self, runtime: Runtime, handle: RuntimeHandle) -> None:
        self.runtime, self.handle = runtime, handle
        self.out = runtime.scratch(handle)

    async def read_only(
        self, script: str, log_name: str, timeout_s: float = 120
    ) -> tuple[int | None, str]:
        code, _, log = await run_in(self.runtime, self.handle, script, log_name, timeout_s)
        return code, log

    async def versions(self, base: str, files: Sequence[str]) -> list[tuple[Content, Content]]:
        out = self.out / "git-versions"
        await run_in(self.runtime, self.handle, versions_command(base, files, out), "versions", 60)
        found = [
            (_read(out, f"{i}.base", VERSION_LIMIT), _read(out, f"{i}.new", VERSION_LIMIT))
            for i in range(len(files))
        ]
        await asyncio.to_thread(shutil.rmtree, out, True)
        return found

    async def restore(
        self, base: str, files: Sequence[str], log_name: str, timeout_s: float = 120
    ) -> tuple[int | None, str]:
        return await self.read_only(restore_command(base, files), log_name, timeout_s)

    async def remove(self, files: Sequence[str], log_name: str) -> tuple[int | None, str]:
        script = " && ".join(f"rm -f -- {shlex.quote(f)}" for f in files)
        return await self.read_only(script, log_name, 60)

    async def apply(
        self,
        patch: bytes,
        *,
        name: str,
        reset_to: str,
        timeout_s: float,
        strategies: Sequence[tuple[str, str]] = APPLY_STRATEGIES,
        on_tick: Tick = None,
    ) -> tuple[str | None, list[dict[str, Any]]]:
        return await apply_patch(
            self.runtime,
            self.handle,
            patch,
            name=name,
            timeout_s=timeout_s,
            strategies=strategies,
            reset_to=reset_to,
            on_tick=on_tick,
        )


# --------------------------------------------------------------------------- on a copy


def entries(top: Path, paths: Sequence[str]) -> dict[str, str]:
    """Each of `paths` and the folders on its way that are in the tree `top`, never through a
    link, by kind (`d` a folder, `l` a link, `f` anything else): a path beyond a link or a
    file is not in the tree."""
    found: dict[str, str] = {}
    for rel in paths:
        parts = PurePosixPath(rel).parts
        if not parts or parts[0] == "/" or ".." in parts:
            continue  # not a path of the tree (git applies and checks out none)
        for depth in range(1, len(parts) + 1):
            sub = "/".join(parts[:depth])
            if sub not in found:
                try:  # every folder on its way was lstat-ed a folder: nothing is followed
                    mode = os.lstat(top / sub).st_mode
                except (FileNotFoundError, NotADirectoryError):
                    break
                found[sub] = "d" if stat.S_ISDIR(mode) else "l" if stat.S_ISLNK(mode) else "f"
            if found[sub] != "d":
                break
    return found


def changed_entries(
    before: dict[str, str], after: dict[str, str], touched: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(entries to put, parents first: each touched path in the tree, and each folder on its
    way that is new; entries to remove first: each that left the tree or changed kind)."""
    touched_set = set(touched)
    put = sorted(p for p, kind in after.items() if p in touched_set or before.get(p) != kind)
    removed = sorted(
        {p for p in touched_set if p not in after}
        | {p for p, kind in before.items() if after.get(p) != kind}
    )
    return put, removed


def remove_entry(top: Path, rel: str) -> None:
    """`rm -rf top/rel`, never through a link (a path beyond a link or a file is not there)."""
    *folders, name = PurePosixPath(rel).parts
    if name in ("..", ".") or ".." in folders:
        raise EvaluatorError(f"not a plain relative path: {rel!r}")
    try:
        with safe_files.open_dir(top, "/".join(folders) or ".") as fd:
            mode = os.lstat(name, dir_fd=fd).st_mode
            if stat.S_ISDIR(mode):
                shutil.rmtree(name, dir_fd=fd)
            else:
                os.unlink(name, dir_fd=fd)
    except (FileNotFoundError, NotADirectoryError, safe_files.UnsafePath):
        pass


class CopyGit:
    """The worker's own git on a copy of a container's workspace, its changes put back."""

    def __init__(self, runtime: Runtime, handle: RuntimeHandle, folder: Path) -> None:
        assert isinstance(runtime, WorkspaceWriter)
        self.runtime, self.handle, self.folder = runtime, handle, folder
        self.out = folder / "out"
        self.out.mkdir()
        self._copy: Path | None = None
        self.pristine = True
        """Whether the copy is still the workspace as it was copied."""

    async def copy(self) -> Path:
        """The copy, made at the first call (WorkerGitFailed where its `.git` cannot be
        used by the worker's git)."""
        if self._copy is None:
            copy = self.folder / "workspace"
            copy.mkdir()
            await copy_into(self.runtime, self.handle, copy)
            self._copy = copy
        return self._copy

    async def _git(
        self, script: str, timeout_s: float, tick: Tick = None
    ) -> tuple[int | None, str]:
        try:
            copy = await self.copy()
        except WorkerGitFailed as exc:
            raise EvaluatorError(f"the evaluator runtime's workspace: {exc}") from None
        return await _run_git(copy, f"{NO_GIT_ABOVE}\n{script}", {}, timeout_s, tick)

    async def read_only(
        self, script: str, log_name: str, timeout_s: float = 120
    ) -> tuple[int | None, str]:
        return await self._git(script, timeout_s)

    async def versions(self, base: str, files: Sequence[str]) -> list[tuple[Content, Content]]:
        out = self.out / "git-versions"
        await self._git(versions_command(base, files, out, current=False), 60)
        copy = await self.copy()
        found = [
            (_read(out, f"{i}.base", VERSION_LIMIT), _read(copy, f, VERSION_LIMIT))
            for i, f in enumerate(files)
        ]
        await asyncio.to_thread(shutil.rmtree, out, True)
        return found

    async def restore(
        self, base: str, files: Sequence[str], log_name: str, timeout_s: float = 120
    ) -> tuple[int | None, str]:
        listed = self.out / "restore-absent"  # removing them is the worker's, never git's
        return await self._change(files, restore_command(base, files, listed), timeout_s, listed)

    async def remove(self, files: Sequence[str], log_name: str) -> tuple[int | None, str]:
        return await self._change(files, None, 60, None)

    async def _change(
        self, files: Sequence[str], script: str | None, timeout_s: float, absent: Path | None
    ) -> tuple[int | None, str]:
        """Run `script` on the copy (if any), remove the files it lists in `absent` (or all of
        `files` where there is no script), and put what changed into the workspace."""
        copy = await self.copy()
        before = entries(copy, files)
        self.pristine = False
        code: int | None = 0
        log = ""
        gone: Sequence[str] = files
        if script is not None:
            code, log = await self._git(script, timeout_s)
            listed = _read(self.out, absent.name, 1 << 20) if absent else None
            lines = listed.decode().split() if isinstance(listed, bytes) else []
            gone = [files[int(i)] for i in lines if i.isdigit() and int(i) < len(files)]
        for rel in gone:
            await asyncio.to_thread(remove_entry, copy, rel)
        await self._put(copy, files, before)
        return code, log

    async def _put(self, copy: Path, touched: Sequence[str], before: dict[str, str]) -> None:
        put, removed = changed_entries(before, entries(copy, touched), touched)
        assert isinstance(self.runtime, WorkspaceWriter)
        await self.runtime.put_workspace(self.handle, copy, put, removed)

    async def apply(
        self,
        patch: bytes,
        *,
        name: str,
        reset_to: str,
        timeout_s: float,
        strategies: Sequence[tuple[str, str]] = APPLY_STRATEGIES,
        on_tick: Tick = None,
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """Git's strategies only (`WORKER_STRATEGIES`), on the copy; the files the patch
        touches put into the workspace (or taken out) where one works, the workspace as it was
        where none does. Between tries the copy is reset to `reset_to`, so a patch applied
        after other changes gets one strategy (a failed `git apply` changes nothing)."""
        tries = [(n, t) for n, t in strategies if n.startswith("git apply")]
        if len(tries) > 1 and not self.pristine:
            raise ValueError("a patch applied on a changed copy is tried with one strategy")
        copy = await self.copy()  # WorkerGitFailed passes: the caller reports the attempt
        path = self.folder / f"{name}.patch"
        path.write_bytes(patch)
        touched = [p for p, _ in split_patch(patch)]
        before = entries(copy, touched)
        reset = (
            f"{CLEAN_GIT} read-tree --reset -u {revision(reset_to)} && "
            f"{CLEAN_GIT} clean -fdq {_clean_keeps_junk()}"
        )
        attempts: list[dict[str, Any]] = []
        for i, (strategy, template) in enumerate(tries):
            if i:
                await self._git(reset, timeout_s, on_tick)
            command = template.replace("git apply", f"{CLEAN_GIT} apply").format(
                patch=shlex.quote(str(path))
            )
            code, log = await self._git(command, timeout_s, on_tick)
            attempts.append({"strategy": strategy, "exit_code": code, "log": log[-2000:]})
            if code == 0:
                self.pristine = False
                await self._put(copy, touched, before)
                return strategy, attempts
        if len(tries) > 1:  # the copy as the workspace still is
            await self._git(reset, timeout_s, on_tick)
        return None, attempts

"""A session's workspace, for every runtime kind: its dir, its source, git on it, the worker's copy.

Every runtime kind keeps a session's host side in `session_dir(root, session_id)`
(a checked id only). `materialise_source` fills a workspace from the task's source
(a directory copy or a git clone at its ref), on the worker: the local runtime in
place, a container runtime before copying it in. Every git call on a task's input
goes through `_git` (no `ext::` transport, no hooks, a timeout; a transient failure
is SourceUnavailable, retried).

After the harness exits, the worker reads its work from a copy of its own (the trusted base,
docs/threat-model.md): the `local` runtime copies the workspace dir (`copy_workspace_dir`),
a container runtime unpacks the engine's archive of it. Either way only directories,
regular files and symbolic links (as links, never followed) arrive, a link out of the copy
is left out, and of the workspace's `.git` only what a diff needs: its objects (without
`objects/info/alternates`, through which git would read objects from wherever the harness
pointed) and its index. Junk folders (`JUNK_DIRS`: caches, virtual environments, harness
config, the `.git` of nested repositories) are skipped where the copy is made here; the
extraction leaves them out of the patch anyway.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import stat
import subprocess
from collections.abc import Collection
from pathlib import Path

from activities.runtimes.base import InvalidRuntime, InvalidSource, SourceUnavailable
from polar.host_paths import local_git_path, resolved_problem
from polar.ids import InvalidId, checked_id
from polar.tasks.spec import DirSource, GitSource, Source


# ---------------------------------------------------------------------- session dirs
def session_dir(root: Path, session_id: str) -> Path:
    """`root/session_id`, for a checked id only (InvalidRuntime otherwise): every runtime's
    session dir, so no id reaches outside `root`."""
    try:
        return root / checked_id(session_id, "session id")
    except InvalidId as exc:
        raise InvalidRuntime(str(exc)) from None


def session_dirs(root: Path) -> set[str]:
    """The session ids with a dir under `root` (names that are not valid ids are skipped)."""
    if not root.is_dir():
        return set()
    found = set()
    for child in root.iterdir():
        try:
            found.add(checked_id(child.name, "session id"))
        except InvalidId:
            continue
    return found


# ---------------------------------------------------------------------- the task's source
def materialise_source(
    source: Source | None, workspace: Path, forbidden: tuple[Path, ...] = ()
) -> None:
    """Fill `workspace` from a directory copy or a git clone (or leave it empty).

    A host path (a dir source, a git source's local path) is checked once resolved: never /
    or a system directory (polar/host_paths.py), nor under `forbidden` (the runtime's own
    session dirs). Every git argument the task gives comes after `--` (the url), or is a ref
    that cannot start with '-' (TaskSpec refuses it; checked here again) right before `--`.
    A source that does not exist is InvalidSource (not retried); a fetch that may work next
    time (network error, timeout) is SourceUnavailable (retried).
    """
    if source is None:
        workspace.mkdir(parents=True)
    elif isinstance(source, DirSource):
        src = Path(source.path)
        _check_host_path(src, "source.path", forbidden)
        if not src.is_dir():
            raise InvalidSource(f"source directory {src} does not exist")
        shutil.copytree(src, workspace, symlinks=True)
    elif isinstance(source, GitSource):
        local = local_git_path(source.url)
        if local is not None:
            _check_host_path(local, "git url", forbidden)
        # --no-hardlinks: a local clone would otherwise share the source's object files (one
        # inode): the workspace's chown to the sandbox user would hand the source's objects,
        # and every other session's cloned from it, to that user, and race their clones
        # (git: "hardlink different from source")
        _git(["clone", "--quiet", "--no-hardlinks", "--", source.url, str(workspace)], Path.cwd())
        if source.ref:
            if source.ref.startswith("-"):
                raise InvalidSource(f"git ref {source.ref!r} starts with '-'")
            _git(["checkout", "--quiet", source.ref, "--"], workspace)


def _check_host_path(path: Path, what: str, forbidden: tuple[Path, ...]) -> None:
    problem = resolved_problem(path, forbidden)
    if problem is not None:
        raise InvalidSource(f"{what} {path} {problem}: a task may not read it")


GIT = ["git", "-c", "protocol.ext.allow=never", "-c", "core.hooksPath=/dev/null"]
"""Every git call: no `ext::` transport (nor in submodules), no hooks."""

GIT_TIMEOUT_S = 600.0
"""The longest a git call (a clone of a big repository) may take."""

TRANSIENT_GIT_ERROR = re.compile(
    r"could not resolve (host|proxy)|temporary failure in name resolution"
    r"|failed to connect|couldn't connect|connection (refused|reset|timed out|closed)"
    r"|operation timed out|early eof|rpc failed|remote end hung up|unexpected disconnect"
    r"|transfer closed|empty reply from server|gnutls_handshake|ssl_error_syscall"
    r"|openssl ssl_(read|connect)|returned error: (408|429|5\d\d)",
    re.IGNORECASE,
)
"""What git prints when a fetch failed for a reason that may pass (the network, the
remote's load); anything else (no such repository or ref, refused access) is the task's."""


def _git(args: list[str], cwd: Path) -> None:
    """Run git; InvalidSource if it refused the task's input, SourceUnavailable if it may
    work on a retry (a transient error, a timeout, git killed by a signal)."""
    what = f"git {args[0]}"
    # its own process group: a timeout kills its transport helpers too (git-remote-https
    # holds the pipes, and would keep `communicate` waiting)
    with subprocess.Popen(
        [*GIT, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            _, stderr = proc.communicate(timeout=GIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise SourceUnavailable(f"{what} timed out after {GIT_TIMEOUT_S:.0f}s") from None
    if proc.returncode == 0:
        return
    message = f"{what} failed: {git_error(stderr)}"
    if proc.returncode < 0 or is_transient_git_error(stderr):
        raise SourceUnavailable(message)
    raise InvalidSource(message)


def is_transient_git_error(stderr: str) -> bool:
    """Whether git's error output says the failure may pass on a retry."""
    return TRANSIENT_GIT_ERROR.search(stderr) is not None


def git_error(stderr: str) -> str:
    """Git's own first error line (`fatal:`/`error:`, else its first line), at most 300
    characters, a URL's credentials masked: never more of what git printed, which can quote
    host files, into a workflow's error."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    first = next((x for x in lines if x.startswith(("fatal:", "error:"))), None)
    text = first or (lines[0] if lines else "no error output")
    return re.sub(r"://[^/@\s]+@", "://***@", text)[:300]


# ---------------------------------------------------------------------- the worker's copy
GIT_KEPT = ("objects", "index")
"""What of the workspace's `.git` a copy holds."""
ALTERNATES = ("objects/info/alternates", "objects/info/http-alternates")
"""Files of a `.git` that point git at other object stores: never in a copy."""


def copy_workspace_dir(src: Path, dest: Path, junk: Collection[str] = ()) -> list[str]:
    """Copy the workspace `src` into the empty dir `dest`: dirs, regular files (mode kept)
    and symlinks (as links); folders named in `junk` below the top are skipped, and of the
    top `.git` only `GIT_KEPT`. What could not be copied (a FIFO, a device, a socket, a file
    the worker may not read, a path too long or too deep for the copy's place) is left out:
    its relative path, returned. Iterative: a tree as deep as the harness likes is no
    RecursionError, and only the worker's own full disk raises."""
    skipped: list[str] = []
    # (source dir, its copy, its relative path with a trailing slash, junk names there)
    pending: list[tuple[str, Path, str, Collection[str]]] = [(str(src), dest, "", junk)]
    while pending:
        folder, copy, rel, skip = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            skipped.append(rel or ".")
            continue
        for entry in entries:
            path, target = f"{rel}{entry.name}", copy / entry.name
            try:
                if entry.is_symlink():
                    os.symlink(os.readlink(entry.path), target)
                elif entry.is_dir(follow_symlinks=False):
                    if rel == "" and entry.name == ".git":
                        target.mkdir()
                        pending += _git_parts(Path(entry.path), target, skipped)
                    elif entry.name not in skip:
                        target.mkdir()
                        pending.append((entry.path, target, f"{path}/", skip))
                elif not _copy_file(entry.path, target):
                    skipped.append(path)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise  # the worker's own disk: not the session's doing
                skipped.append(path)
    drop_alternates(dest)
    return skipped


def _git_parts(
    src: Path, dest: Path, skipped: list[str]
) -> list[tuple[str, Path, str, Collection[str]]]:
    """Copy the `.git` files of `GIT_KEPT`; the folders among them, to copy next."""
    folders: list[tuple[str, Path, str, Collection[str]]] = []
    for name in GIT_KEPT:
        path = src / name
        if path.is_symlink():
            continue
        if path.is_dir():
            (dest / name).mkdir()
            folders.append((str(path), dest / name, f".git/{name}/", ()))
        elif not _copy_file(str(path), dest / name) and path.exists():
            skipped.append(f".git/{name}")
    return folders


def _copy_file(path: str, target: Path) -> bool:
    """Copy one regular file, never through a link nor blocking on a FIFO; whether it was."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return False
        with open(target, "xb") as out:
            try:
                shutil.copyfileobj(source, out, 1 << 20)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise  # the worker's own disk: not the session's doing
                return False
        os.chmod(target, stat.S_IMODE(info.st_mode) & 0o755 | 0o600)
    return True


def drop_alternates(copy: Path) -> None:
    """Make the copy's `.git` safe to read: no alternates, no `.git` or objects dir that is a
    link (git would follow it wherever it points)."""
    git = copy / ".git"
    if git.is_symlink():
        git.unlink()
        return
    objects = git / "objects"
    if objects.is_symlink():
        objects.unlink()
    for name in ALTERNATES:
        path = git / name
        if path.is_symlink() or path.exists():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()

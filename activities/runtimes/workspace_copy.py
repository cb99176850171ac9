"""A copy of a session's workspace on the worker, made without running anything in the sandbox.

After the harness exits, the worker reads its work from a copy of its own (the trusted base,
docs/threat-model.md): the `local` runtime copies the workspace dir, a container runtime
unpacks the engine's archive of it. Either way only directories, regular files and symbolic
links (as links, never followed) arrive, a link out of the copy is left out, and of the
workspace's `.git` only what a diff needs: its objects (without `objects/info/alternates`,
through which git would read objects from wherever the harness pointed) and its index. Junk
folders (`JUNK_DIRS`: caches, virtual environments, harness config, the `.git` of nested
repositories) are skipped where the copy is made here; the extraction leaves them out of
the patch anyway.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Collection
from pathlib import Path

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

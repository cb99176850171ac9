"""Which worker-host paths a task may read: never `/` or a system directory.

A task names host paths in `source.path` (a directory copied into the
workspace), a git source's local `url` and an upload action's `src`; the
harness then reads what they hold. The rules: not `/`, not at or under a
directory of FORBIDDEN_HOST_DIRS (system config and state, kernel interfaces,
root's home, boot files, system programs and libraries), and, once resolved,
under one of the worker's source roots (`POLAR_SOURCE_ROOTS`; default: the
worker's working directory, the project it runs in). The TaskSpec checks an
absolute path as written (submit fails); the worker checks every path again,
resolved (symlinks followed, a relative one from its working directory), right
before it reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

FORBIDDEN_HOST_DIRS = (
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/boot",
    "/root",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/var/lib",
    "/var/run",
    "/var/log",
    "/var/spool",
    "/var/mail",
    "/var/cache",
    "/var/backups",
    "/private/etc",
    "/private/var/db",
)


def host_path_problem(path: str) -> str | None:
    """Why the absolute `path` (as written: `..` resolved lexically, symlinks not) may not be
    read for a task, or None; a relative path is None here (the worker checks it)."""
    if not path.startswith("/"):
        return None
    normal = "/" + os.path.normpath(path).lstrip("/")
    if normal == "/":
        return "the root directory"
    for top in FORBIDDEN_HOST_DIRS:
        if normal == top or normal.startswith(top + "/"):
            return f"in the system directory {top}"
    return None


def checked_host_path(path: str, what: str) -> str:
    """`path` if its absolute form is allowed (ValueError naming `what` otherwise)."""
    problem = host_path_problem(path)
    if problem is not None:
        raise ValueError(
            f"{what} {path!r} is {problem}: a task may not read / or a system directory "
            "(FORBIDDEN_HOST_DIRS in polar/host_paths.py)"
        )
    return path


def resolved_problem(path: Path, forbidden: tuple[Path, ...] = ()) -> str | None:
    """Why the worker may not read `path` once resolved (symlinks followed, relative to its
    working directory), or None; `forbidden` adds directories (e.g. the runtimes' root)."""
    real = path.resolve()
    problem = host_path_problem(str(real))
    if problem is not None:
        return f"resolves to {real}, {problem}" if str(real) != str(path) else problem
    for top in forbidden:
        if real.is_relative_to(top.resolve()):
            return f"resolves to {real}, inside {top}"
    return None


def source_roots(configured: str | None) -> tuple[Path, ...]:
    """The directories tasks may read host paths from: `configured` (comma-separated), or
    the working directory when unset. `/` is never one."""
    paths = [p.strip() for p in (configured or "").split(",") if p.strip()] or [os.getcwd()]
    roots = tuple(Path(p).resolve() for p in paths)
    if Path("/") in roots:
        raise ValueError("POLAR_SOURCE_ROOTS may not contain /: name the directories")
    return roots


def outside_roots(path: Path, roots: tuple[Path, ...]) -> str | None:
    """Why `path`, resolved, is outside every source root (None when it is inside one)."""
    real = path.resolve()
    if any(real == root or real.is_relative_to(root) for root in roots):
        return None
    shown = ", ".join(str(r) for r in roots)
    return (
        f"resolves to {real}, outside the source roots ({shown}): "
        "a task reads host paths only under POLAR_SOURCE_ROOTS"
    )


def local_git_path(url: str) -> Path | None:
    """The host path a git url names (git's rule: no `://`, no `host:` before the first
    `/`), or None for a remote."""
    if "://" in url:
        return None
    colon, slash = url.find(":"), url.find("/")
    if colon > 0 and (slash < 0 or colon < slash):
        return None  # scp-like user@host:path
    return Path(url)

"""Files the worker reads and writes in directories a sandboxed user may own, never through a
link that user planted.

Every component below `base` is opened with `O_NOFOLLOW | O_DIRECTORY` relative to its
parent's file descriptor, and the file itself with `O_NOFOLLOW`, so a symlink (or a directory
swapped for one) anywhere on the path is refused with `UnsafePath`, never followed. `base`
itself is trusted: the worker made it, or it is a root-owned parent. Writes replace the file
(unlinked first: a hard link to someone else's file is cut, not written through).

Logs (`read_log`) are read within a byte cap: a longer one keeps its head and tail around a
`truncated: N bytes dropped` note, never held whole in the worker's memory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePath

__all__ = [
    "TooLarge",
    "UnsafePath",
    "open_dir",
    "read_bytes",
    "read_log",
    "read_log_file",
    "remove",
    "truncation_note",
    "write_bytes",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(OSError):
    """A path under a sandbox-owned directory holds a symlink (or is not what it should be)."""


class TooLarge(OSError):
    """A file is bigger than the caller's `max_size` (measured before any of it is read)."""

    def __init__(self, path: Path, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{path} is {size} bytes, over the limit of {limit}")
        self.size, self.limit = size, limit


def _parts(relative: PurePath | str) -> list[str]:
    parts = [p for p in PurePath(relative).parts if p not in ("", ".")]
    if not parts or any(p == ".." or p.startswith("/") for p in parts):
        raise UnsafePath(errno.EINVAL, f"not a plain relative path: {relative!s}")
    return parts


@contextlib.contextmanager
def open_dir(base: Path, relative: PurePath | str = ".", *, create: bool = False) -> Iterator[int]:
    """An fd of `base/relative`, each component opened no-follow; `create` makes missing dirs
    (mode 0o755)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [p for p in PurePath(relative).parts if p not in ("", ".")]:
            if part == "..":
                raise UnsafePath(errno.EINVAL, f"'..' in {relative!s}")
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePath(exc.errno, f"{base / relative}: {part} is a link") from exc
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def write_bytes(base: Path, relative: PurePath | str, data: bytes, *, mode: int = 0o644) -> None:
    """Write `base/relative` afresh (any old entry of that name removed first), no-follow."""
    *folders, name = _parts(relative)
    with open_dir(base, PurePath(*folders) if folders else ".", create=True) as dir_fd:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            os.unlink(name, dir_fd=dir_fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, mode, dir_fd=dir_fd)
        except FileExistsError as exc:  # a directory, or a name re-planted in between
            raise UnsafePath(exc.errno, f"{base / relative} cannot be replaced") from exc
        with os.fdopen(fd, "wb") as out:
            out.write(data)


def _open_regular(base: Path, relative: PurePath | str) -> tuple[int, os.stat_result] | None:
    """(fd, stat) of the regular file `base/relative`, opened no-follow; None where absent;
    UnsafePath where it, or a folder on its way, is a link or not a regular file."""
    *folders, name = _parts(relative)
    try:
        with open_dir(base, PurePath(*folders) if folders else ".") as dir_fd:
            try:
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
                fd = os.open(name, flags, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise UnsafePath(exc.errno, f"{base / relative} is a link") from exc
                raise
    except FileNotFoundError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # a FIFO, a device
        os.close(fd)
        raise UnsafePath(errno.EINVAL, f"{base / relative} is not a regular file")
    return fd, st


def read_bytes(
    base: Path,
    relative: PurePath | str,
    *,
    limit: int | None = None,
    max_size: int | None = None,
) -> bytes | None:
    """The bytes of the regular file `base/relative` (at most `limit`), None where it is
    absent; UnsafePath where it, or a folder on its way, is a link or not a regular file;
    TooLarge, nothing read, where it is bigger than `max_size`."""
    opened = _open_regular(base, relative)
    if opened is None:
        return None
    fd, st = opened
    with os.fdopen(fd, "rb") as src:
        if max_size is not None and st.st_size > max_size:
            raise TooLarge(base / relative, st.st_size, max_size)
        if max_size is not None:  # it may grow while read: never past the limit
            limit = max_size + 1 if limit is None else min(limit, max_size + 1)
        data = src.read() if limit is None else src.read(limit)
        if max_size is not None and len(data) > max_size:
            raise TooLarge(base / relative, len(data), max_size)
        return data


def truncation_note(dropped: int, size: int, limit: int) -> bytes:
    """The line that stands for the middle of a log cut to `limit` bytes."""
    return (
        f"\n[polar: truncated: {dropped} bytes dropped (the log had {size} bytes; "
        f"POLAR_MAX_LOG_BYTES={limit} keeps its head and tail)]\n"
    ).encode()


def _pread(fd: int, size: int, offset: int) -> bytes:
    chunks = []
    while size > 0 and (chunk := os.pread(fd, min(size, 1 << 20), offset)):
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def read_log(base: Path, relative: PurePath | str, *, limit: int) -> bytes | None:
    """The log `base/relative` (no-follow, as `read_bytes`), None where absent. One of more
    than `limit` bytes keeps its first eighth of `limit` and its last seven eighths around a
    `truncation_note`: at most `limit` bytes of it are ever read into memory (a log that grows
    while read is cut where it was measured)."""
    opened = _open_regular(base, relative)
    if opened is None:
        return None
    fd, st = opened
    try:
        size = st.st_size
        if size <= limit:
            return _pread(fd, size, 0)
        head = limit // 8
        tail = limit - head
        dropped = size - head - tail
        return (
            _pread(fd, head, 0)
            + truncation_note(dropped, size, limit)
            + _pread(fd, tail, size - tail)
        )
    finally:
        os.close(fd)


def read_log_file(path: Path, *, limit: int) -> bytes:
    """`read_log` of the file `path` (its folder trusted: the worker's own logs dir), b""
    where absent, a one-line note where it is a link or not a regular file."""
    try:
        return read_log(path.parent, path.name, limit=limit) or b""
    except OSError as exc:
        return f"[polar: log not read: {exc}]\n".encode()


def remove(base: Path, relative: PurePath | str) -> None:
    """Remove the file (or link) `base/relative` if there, never following a link."""
    *folders, name = _parts(relative)
    try:
        with open_dir(base, PurePath(*folders) if folders else ".") as dir_fd:
            os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass

"""Copies into and out of a container through the engine's tar archives (docker, podman).

In: a tar made on the worker, owned by root, unpacked by the engine into an existing dir
(`put_dir_contents`, `put_path`). Out: the engine's archive of a container's dir, checked
whole (a stream cut short is fetched again, `retried`), then read member by member
(`read_members`) or extracted under tarfile's `data` filter (`archive_into`), what cannot
come over skipped and named. Nothing runs in the container for either.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import tarfile
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from docker.errors import NotFound

from activities.runtimes.base import InvalidRuntime

log = logging.getLogger("polar.worker")
T = TypeVar("T")

SYNC_TRIES = 3
"""Tries at copying a dir out of a container: the engine's archive stream may end early."""
SKIPPED_NOTE = "polar-skipped.txt"
"""In a dir copied out of a container: what was left out of it, and why (one per line)."""


def read_members(
    container: Any, folder: str, names: Collection[str], limit: int
) -> tuple[dict[str, bytes], dict[str, str]]:
    """The regular files among `names` right in the container's dir `folder`, read from the
    engine's archive (no member is extracted); the others there: what each is."""
    found: dict[str, bytes] = {}
    odd: dict[str, str] = {}
    try:
        with _archive(container, folder) as tar:
            for member in tar:
                parts = PurePosixPath(member.name).parts
                if len(parts) != 2 or parts[1] not in names:
                    continue
                if member.isfile():
                    data = tar.extractfile(member)
                    found[parts[1]] = data.read(limit) if data is not None else b""
                elif member.issym() or member.islnk():
                    odd[parts[1]] = "a link, not a file"
                else:
                    odd[parts[1]] = "not a regular file"
    except NotFound:  # no such folder: no files
        return {}, {}
    return found, odd


def retried(copy: Callable[[], T], what: str) -> T:
    """`copy` (a copy out of a container), tried again (`SYNC_TRIES`, with backoff) where the
    engine's archive stream ended early or was reset; the worker's own disk errors raise."""
    for attempt in range(SYNC_TRIES):
        try:
            return copy()
        except (tarfile.ReadError, EOFError, OSError) as exc:
            if isinstance(exc, OSError) and not _transient(exc):
                raise
            if attempt == SYNC_TRIES - 1:
                raise
            log.warning("copying %s out of the container: %s; again", what, exc)
            time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


def archive_into(container: Any, path: str, dest: Path) -> list[tuple[str, str]]:
    """The engine's archive of the container's dir `path`, whole, extracted into `dest`
    (`_extract_within`); what was skipped, and why."""
    with _archive(container, path) as tar:
        return _extract_within(tar, dest)


@contextlib.contextmanager
def _archive(container: Any, path: str) -> Iterator[tarfile.TarFile]:
    """The engine's archive of the container's `path`, whole (`_check_whole`), to read."""
    stream, _ = container.get_archive(path)
    with tempfile.TemporaryFile() as buf:
        for chunk in stream:
            buf.write(chunk)
        _check_whole(buf)
        buf.seek(0)
        with tarfile.open(fileobj=buf) as tar:
            yield tar


def _check_whole(buf: Any) -> None:
    """Raise ReadError unless `buf` (at its end) holds a whole tar archive: whole blocks and
    the two zero blocks that end one. A stream cut at a header would read as a shorter tree."""
    size = buf.tell()
    buf.seek(max(0, size - 2 * tarfile.BLOCKSIZE))
    if size % tarfile.BLOCKSIZE or buf.read() != bytes(2 * tarfile.BLOCKSIZE):
        raise tarfile.ReadError(f"the archive stream ended early ({size} bytes)")


def _transient(exc: OSError) -> bool:
    """An OSError of the engine's stream (reset, broken pipe), not of the worker's disk."""
    return exc.errno in (errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED, None)


def _extract_within(tar: tarfile.TarFile, dest: Path) -> list[tuple[str, str]]:
    """Extract `tar` (one top dir, dropped) into `dest`, member by member under tarfile's
    `data` filter; what cannot be extracted is skipped: its name and why."""
    skipped: list[tuple[str, str]] = []
    for member in tar:
        parts = PurePosixPath(member.name).parts[1:]  # drop the top dir
        if not parts:
            continue
        member.name = str(PurePosixPath(*parts))
        if member.islnk():  # a hard link names its target by its path in the archive
            target = PurePosixPath(member.linkname).parts[1:]
            member.linkname = str(PurePosixPath(*target)) if target else ""
        try:
            tar.extract(member, dest, filter=_data_or_skip)
        except (tarfile.TarError, KeyError, OSError, ValueError) as exc:
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise  # the worker's own disk: not the session's doing
            skipped.append((member.name, f"{type(exc).__name__}: {exc}"))
    return skipped


def _data_or_skip(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, leaving out (instead of failing on) what it refuses: a link
    the harness made to an absolute path or out of the dir is not brought to the worker."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _put_tar(container: Any, dest_dir: str, fill: Callable[[tarfile.TarFile], None]) -> None:
    """Copy a tar made by `fill` into the container's dir `dest_dir`. The archive ends at its
    end-of-archive marker, without tarfile's padding to a whole record: `podman cp -` stops
    reading at the marker, and the padding it is still sent then fails the copy ("io:
    read/write on closed pipe") at some archive sizes (a 2,417,717-byte patch did, 3/3)."""
    with tempfile.TemporaryFile() as buf:
        with tarfile.open(fileobj=buf, mode="w") as tar:
            fill(tar)
            end = tar.offset
        size = end + 2 * tarfile.BLOCKSIZE  # the marker: two zero blocks
        buf.truncate(size)
        buf.seek(0)
        data = buf if size > 64 * 1024 * 1024 else io.BytesIO(buf.read())
        if not container.put_archive(dest_dir, data):
            raise InvalidRuntime(f"copying into {dest_dir} in the container failed")


def put_dir_contents(container: Any, src: Path, dest_dir: str) -> None:
    """Copy the contents of host dir `src` into existing container dir `dest_dir`."""

    def fill(tar: tarfile.TarFile) -> None:
        for child in sorted(src.iterdir()):
            tar.add(child, arcname=child.name, filter=_owned_by_root)

    _put_tar(container, dest_dir, fill)


def put_path(container: Any, src: Path, target: PurePosixPath) -> None:
    """Copy host file or dir `src` to the container path `target` (its parent exists)."""

    def fill(tar: tarfile.TarFile) -> None:
        tar.add(src, arcname=target.name, filter=_owned_by_root)

    _put_tar(container, str(target.parent), fill)


def put_entries(
    container: Any, src: Path, dest_dir: str, paths: Collection[str], owner: tuple[int, int]
) -> None:
    """Copy the entries `paths` of host dir `src` (relative; dirs, files, links; each one
    entry, never recursively) into the container's dir `dest_dir`, owned by `owner`."""

    def fill(tar: tarfile.TarFile) -> None:
        for rel in paths:
            info = tar.gettarinfo(str(src / rel), arcname=rel)
            info.uid, info.gid = owner
            info.uname = info.gname = ""
            if info.isreg():
                with (src / rel).open("rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)

    _put_tar(container, dest_dir, fill)

"""One collected artifact read from an engine's tar stream, within bounds (no I/O of its own).

An engine's archive of a container path (`docker cp`'s, `podman cp`'s) is read as a stream,
member by member, never extracted: regular files are kept in memory, folders give their
members' names, and anything else (a symlink to anywhere, a hard link, a device, a FIFO) is
left out and named: nothing the harness planted is followed. A `Budget` shared by one
collection bounds the files kept, their bytes, and the bytes read from the engine at all (a
file past what is left is read through, not kept, up to that last bound; past it the stream is
dropped). Every file left out is named in `notes`, and `limit_hit` says a bound was reached.
"""

from __future__ import annotations

import fnmatch
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import IO

from activities.harnesses.artifacts import MAX_NOTES, unkeyable

__all__ = [
    "MAX_BYTES",
    "MAX_FILES",
    "MAX_READ_BYTES",
    "Budget",
    "ChunkStream",
    "ReadArtifact",
    "StreamTooLong",
    "excluded",
    "read_artifact",
]

MAX_FILES = 1000
"""Most files one collection keeps (all its artifacts together)."""
MAX_BYTES = 64 << 20
"""Most bytes one collection keeps (all its files together)."""
MAX_READ_BYTES = 4 * MAX_BYTES
"""Most bytes one collection reads from the engine (what it reads through and drops too)."""
MAX_NAME_BYTES = 512
"""The longest name a collected file may have (its key's part below the collection's folder)."""


class StreamTooLong(Exception):
    """The engine's stream passed the collection's read bound: it is dropped there."""


@dataclass
class Budget:
    """What is left of one collection's bounds."""

    files: int = MAX_FILES
    bytes: int = MAX_BYTES
    read: int = MAX_READ_BYTES
    limit_hit: bool = False

    @property
    def limits(self) -> dict[str, int]:
        return {"max_files": MAX_FILES, "max_bytes": MAX_BYTES, "max_read_bytes": MAX_READ_BYTES}


class ChunkStream:
    """A file-like `read` over an iterator of byte chunks (an engine's archive stream),
    counting against `budget.read`: StreamTooLong past it."""

    def __init__(self, chunks: Iterable[bytes], budget: Budget) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._buf = b""
        self._budget = budget

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buf) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._budget.read -= len(chunk)
            if self._budget.read < 0:
                self._budget.limit_hit = True
                raise StreamTooLong(f"the engine's archive passed {MAX_READ_BYTES} bytes read")
            self._buf += chunk
        if size < 0:
            data, self._buf = self._buf, b""
        else:
            data, self._buf = self._buf[:size], self._buf[size:]
        return data


@dataclass
class ReadArtifact:
    """One artifact as read: its type (`file`, `directory`; None: nothing came), its files
    (name below the artifact: `""` for a file artifact itself, and content), what was left
    out and why."""

    type: str | None = None
    files: list[tuple[str, bytes]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    left_out: int = 0

    def leave_out(self, name: str, why: str) -> None:
        self.left_out += 1
        if len(self.notes) < MAX_NOTES:
            self.notes.append(f"{name or '.'}: {why}")

    @property
    def bytes(self) -> int:
        return sum(len(data) for _, data in self.files)


def excluded(name: str, patterns: list[str]) -> bool:
    """Whether a member's path below the artifact matches a pattern, as tar's --exclude
    matches (`*.log`, `cache`, `sub/*.tmp`): the path or a trailing run of its parts, or the
    same of a folder above it (whose members go with it)."""
    parts = PurePosixPath(name).parts
    runs = {"/".join(parts[i:j]) for j in range(1, len(parts) + 1) for i in range(j)}
    return any(fnmatch.fnmatchcase(run, pat) for pat in patterns for run in runs)


def read_artifact(
    stream: IO[bytes] | ChunkStream, exclude: list[str], budget: Budget
) -> ReadArtifact:
    """Read the engine's archive of one path (its top member the path itself) within
    `budget`. StreamTooLong propagates with what was read so far in `.partial`."""
    got = ReadArtifact()
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
            for member in tar:
                _take(tar, member, exclude, budget, got)
    except StreamTooLong as exc:
        exc.partial = got  # type: ignore[attr-defined]
        raise
    except tarfile.ReadError as exc:
        if got.type is None:  # nothing at all came: an empty stream
            raise FileNotFoundError(f"no archive: {exc}") from None
        got.leave_out("", f"the archive ended early ({exc})")
    return got


def _take(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    exclude: list[str],
    budget: Budget,
    got: ReadArtifact,
) -> None:
    parts = PurePosixPath(member.name).parts
    name = "/".join(parts[1:])
    if got.type is None:  # the top member: the source itself
        if member.isdir():
            got.type = "directory"
        elif member.isfile():
            got.type = "file"
        else:
            got.type = "other"
            what = "a symlink" if member.issym() else "a link" if member.islnk() else "special"
            got.leave_out("", f"{what}, not a file or a folder: not followed")
            return
    if got.type == "other" or (got.type == "file" and name):
        return
    if name and excluded(name, exclude):
        return
    if member.isdir():
        return
    if not member.isfile():
        what = "a symlink" if member.issym() else "a hard link" if member.islnk() else "special"
        got.leave_out(name, f"{what} (not followed)")
        return
    if any(p in (".", "..") for p in parts[1:]) or member.name.startswith("/"):
        got.leave_out(ascii(name), "a name with '.' or '..' parts")
        return
    problem = unkeyable(name, MAX_NAME_BYTES) if name else None
    if problem is not None:
        got.leave_out(name if name.isprintable() else ascii(name), problem)
        return
    if budget.files <= 0:
        budget.limit_hit = True
        got.leave_out(name, f"past the {MAX_FILES}-file limit of the collection")
        return
    if member.size > budget.bytes:
        budget.limit_hit = True
        got.leave_out(name, f"{member.size} bytes, past the {MAX_BYTES}-byte limit left")
        return
    data = tar.extractfile(member)
    content = data.read() if data is not None else b""
    budget.files -= 1
    budget.bytes -= len(content)
    got.files.append((name, content))

"""The harness's own artifacts: what it writes under `$POLAR_ARTIFACTS_DIR`, read safely.

The directory lives in the session's fresh HOME (`ARTIFACTS_SUBDIR`), so every
runtime brings it back to the worker the way it brings native logs (the local
runtime shares the disk; the container runtimes sync HOME out after each
command). The worker reads it after the harness was reaped and before teardown
deletes HOME, as the harness's adversary would not want: symlinks (to a file or
a directory) are never followed, only regular files with a single link are read
(`O_NOFOLLOW`, walked by directory descriptors), and the total is bounded by
`MAX_FILES` and `MAX_BYTES`. A name must fit in an S3 key: S3 takes keys of at most
1,024 bytes (SeaweedFS also 255 a path part), and a harness that named a file deep
enough used to fail the run stage on every attempt (`infra_error:storage`, a zero kept
out of the baseline); a name past `MAX_NAME_BYTES` (or a part past 255 bytes) is left
out like any other file the reader does not take. What is left out is named in
`Collected.skipped` (the run's `artifacts_skipped`) and logged.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from polar.storage import artifact_key

log = logging.getLogger("polar.harness")

ARTIFACTS_ENV = "POLAR_ARTIFACTS_DIR"
"""The variable naming the directory whose files are kept as session artifacts."""
ARTIFACTS_SUBDIR = ".polar-artifacts"
"""The artifacts directory, relative to the session's HOME."""
MAX_FILES = 1000
"""Most files kept per harness attempt."""
MAX_BYTES = 64 * 1024 * 1024
"""Most bytes kept per harness attempt (all files together)."""
MAX_NOTES = 20
"""Most skipped files named one by one; the rest are counted."""
S3_KEY_MAX_BYTES = 1024
"""The longest object key S3 takes (UTF-8 bytes)."""
SEGMENT_MAX_BYTES = 255
"""The longest part between slashes SeaweedFS takes (a file name's limit, as on Linux)."""
SESSION_ID_MAX = 200
"""The longest session id (`polar.ids.ID_PATTERN`)."""
LONGEST_PREFIX = len(
    artifact_key("s" * SESSION_ID_MAX, f"harness-attempt{10**10 - 1}/artifacts/x").encode()
) - len("x")
"""The longest key an artifact's name is appended to (a 200-character session id, a
10-digit attempt): `sessions/{id}/artifacts/harness-attempt{n}/artifacts/`."""
MAX_NAME_BYTES = S3_KEY_MAX_BYTES - LONGEST_PREFIX
"""The longest artifact name (relative path, UTF-8 bytes) whose key S3 takes in any session."""
SHOWN_NAME = 120
"""Longest name a note shows whole; a longer one is shown by its head and tail."""


@dataclass
class Collected:
    """The artifacts read: (relative name, content) in path order, and what was left out."""

    files: list[tuple[str, bytes]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    total_bytes: int = 0
    _unnamed: int = 0

    def skip(self, name: str, why: str) -> None:
        if len(self.skipped) < MAX_NOTES:
            if len(name) > SHOWN_NAME:
                name = f"{name[: SHOWN_NAME // 2]}...{name[-SHOWN_NAME // 3 :]}"
            self.skipped.append(f"{name}: {why}")
        else:
            self._unnamed += 1

    @property
    def skipped_count(self) -> int:
        """How many files were left out (named or not)."""
        return len(self.skipped) + self._unnamed

    def notes(self) -> list[str]:
        """The skipped files, one line each, plus a count of those not named."""
        more = [f"... and {self._unnamed} more skipped"] if self._unnamed else []
        return [*self.skipped, *more]


def _safe_name(name: str) -> bool:
    """A name S3 and a log reader can take: printable UTF-8, no backslash."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 (surrogate escapes)
        return False
    return name.isprintable() and "\\" not in name


def unkeyable(name: str, max_name_bytes: int = MAX_NAME_BYTES) -> str | None:
    """Why the artifact name `name` (a relative path) cannot become an S3 key in every
    session, or None when it can."""
    if not _safe_name(name):
        return "a name that is not printable UTF-8"
    size = len(name.encode())
    if size > max_name_bytes:
        return (
            f"a name of {size} bytes, past the {max_name_bytes} an S3 key "
            f"({S3_KEY_MAX_BYTES} bytes at most) leaves it"
        )
    longest = max(len(part.encode()) for part in name.split("/"))
    if longest > SEGMENT_MAX_BYTES:
        return f"a path part of {longest} bytes, past the {SEGMENT_MAX_BYTES} the store takes"
    return None


def _read_regular(name: str, dir_fd: int, limit: int, total: int) -> bytes | str:
    """The file `name` of `dir_fd` if it is a regular file of at most `limit` bytes (what is
    left of the `total`); else why not. Opened without following a symlink; checked on the
    open descriptor."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:  # ELOOP: a symlink (planted after the listing)
        return f"not read ({exc.strerror})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_nlink > 1:
            return "a hard link (not followed)"
        if info.st_size > limit:
            return f"{info.st_size} bytes, past the {total}-byte total"
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:  # grew since fstat
            return f"past the {total}-byte total"
        return data
    finally:
        os.close(fd)


def collect_artifacts(
    top: Path,
    *,
    max_files: int = MAX_FILES,
    max_bytes: int = MAX_BYTES,
    max_name_bytes: int = MAX_NAME_BYTES,
) -> Collected:
    """Read the regular files under `top` (a missing `top`, or a symlink in its place, is
    nothing), within `max_files` files and `max_bytes` bytes in all, each named in at most
    `max_name_bytes` bytes (so that its S3 key fits)."""
    got = _collect(top, max_files, max_bytes, max_name_bytes)
    if got.skipped_count:
        log.warning(
            "%d artifact(s) left out of %s: %s", got.skipped_count, top, "; ".join(got.notes())
        )
    return got


def _collect(top: Path, max_files: int, max_bytes: int, max_name_bytes: int) -> Collected:
    got = Collected()
    if not top.is_dir() or top.is_symlink():
        if top.is_symlink():
            got.skip(top.name, "a symlink (not followed)")
        return got
    for parent, dirs, files, dir_fd in os.fwalk(top, follow_symlinks=False):
        dirs.sort()
        rel = Path(parent).relative_to(top)
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(parent, d))]:
            path = (rel / name).as_posix()
            problem = unkeyable(path, max_name_bytes)
            if problem is not None:
                got.skip(path if _safe_name(path) else ascii(path), problem)
                continue
            try:
                mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            except OSError as exc:
                got.skip(path, f"not read ({exc.strerror})")
                continue
            if stat.S_ISLNK(mode):
                got.skip(path, "a symlink (not followed)")
                continue
            if len(got.files) >= max_files:
                got.skip(path, f"past the {max_files}-file limit")
                continue
            data = _read_regular(name, dir_fd, max_bytes - got.total_bytes, max_bytes)
            if isinstance(data, str):
                got.skip(path, data)
                continue
            got.files.append((path, data))
            got.total_bytes += len(data)
    return got

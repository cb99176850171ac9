"""A collected artifact read from an engine's tar stream (activities/artifact_archive.py):
files and folders kept, links and special files never followed, exclusions, and the
collection's bounds on files, bytes and the bytes read at all, each left-out file named."""

from __future__ import annotations

import io
import tarfile

import pytest

from activities import artifact_archive
from activities.artifact_archive import (
    Budget,
    ChunkStream,
    StreamTooLong,
    excluded,
    read_artifact,
)


def _tar(*members: tuple[str, str, bytes | str]) -> bytes:
    """A tar of (name, kind, content): kind file / dir / sym (content: the target) / hard."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, content in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, str(content)
                tar.addfile(info)
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, str(content)
                tar.addfile(info)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
            else:
                data = content if isinstance(content, bytes) else content.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _stream(data: bytes, budget: Budget) -> ChunkStream:
    return ChunkStream((data[i : i + 1000] for i in range(0, len(data), 1000)), budget)


def test_a_folder_keeps_its_files_and_names_what_it_leaves_out() -> None:
    data = _tar(
        ("snap", "dir", b""),
        ("snap/a.txt", "file", "one"),
        ("snap/sub", "dir", b""),
        ("snap/sub/b.txt", "file", "two"),
        ("snap/sub/c.tmp", "file", "junk"),
        ("snap/shadow", "sym", "/etc/shadow"),
        ("snap/up", "sym", "../../etc"),
        ("snap/hard", "hard", "snap/a.txt"),
        ("snap/pipe", "fifo", b""),
    )
    budget = Budget()
    got = read_artifact(_stream(data, budget), ["*.tmp"], budget)
    assert got.type == "directory"
    assert got.files == [("a.txt", b"one"), ("sub/b.txt", b"two")]
    assert got.left_out == 4
    assert any(n.startswith("shadow: a symlink") for n in got.notes), got.notes
    assert any(n.startswith("up: a symlink") for n in got.notes)
    assert any(n.startswith("hard: a hard link") for n in got.notes)
    assert budget.files == artifact_archive.MAX_FILES - 2 and not budget.limit_hit


def test_a_file_artifact_and_a_link_in_its_place() -> None:
    budget = Budget()
    got = read_artifact(_stream(_tar(("summary.txt", "file", "hi")), budget), [], budget)
    assert (got.type, got.files) == ("file", [("", b"hi")])
    got = read_artifact(_stream(_tar(("summary.txt", "sym", "/etc/passwd")), budget), [], budget)
    assert got.type == "other" and got.files == []
    assert got.notes == [".: a symlink, not a file or a folder: not followed"]


def test_the_bounds_on_files_and_bytes_are_named_and_hit() -> None:
    data = _tar(
        ("d", "dir", b""),
        ("d/big", "file", b"x" * 5000),
        ("d/small1", "file", b"y" * 10),
        ("d/small2", "file", b"z" * 10),
    )
    budget = Budget(files=1, bytes=1000)
    got = read_artifact(_stream(data, budget), [], budget)
    assert got.files == [("small1", b"y" * 10)]
    assert budget.limit_hit
    assert got.notes[0].startswith("big: 5000 bytes, past the")
    assert got.notes[1].startswith("small2: past the") and "file limit" in got.notes[1]


def test_a_stream_past_the_read_bound_is_dropped_with_what_came_before() -> None:
    data = _tar(("d", "dir", b""), ("d/a", "file", "a"), ("d/huge", "file", b"h" * 50_000))
    budget = Budget(read=20_000)
    with pytest.raises(StreamTooLong) as info:
        read_artifact(_stream(data, budget), [], budget)
    assert info.value.partial.files == [("a", b"a")]  # type: ignore[attr-defined]
    assert budget.limit_hit


def test_no_archive_at_all_is_a_missing_path() -> None:
    budget = Budget()
    with pytest.raises(FileNotFoundError):
        read_artifact(_stream(b"", budget), [], budget)


@pytest.mark.parametrize(
    ("name", "patterns", "out"),
    [
        ("a/b/c.log", ["*.log"], True),
        ("cache/x", ["cache"], True),
        ("a/cache/x", ["cache"], True),
        ("sub/x.tmp", ["sub/*.tmp"], True),
        ("keep.txt", ["*.log", "cache"], False),
    ],
)
def test_exclusions_match_as_tar_does(name: str, patterns: list[str], out: bool) -> None:
    assert excluded(name, patterns) is out

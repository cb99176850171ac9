"""activities/safe_files.py: a planted symlink anywhere on the path is refused, never followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activities import safe_files
from activities.safe_files import UnsafePath


def test_write_and_read_back(tmp_path: Path) -> None:
    safe_files.write_bytes(tmp_path, "a/b/c.txt", b"hi")
    assert (tmp_path / "a/b/c.txt").read_bytes() == b"hi"
    assert safe_files.read_bytes(tmp_path, "a/b/c.txt") == b"hi"
    assert safe_files.read_bytes(tmp_path, "a/b/missing") is None
    safe_files.remove(tmp_path, "a/b/c.txt")
    assert not (tmp_path / "a/b/c.txt").exists()


def test_a_planted_file_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's file")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "model-apply.patch").symlink_to(victim)
    safe_files.write_bytes(scratch, "model-apply.patch", b"patch")
    assert victim.read_text() == "root's file"
    assert not (scratch / "model-apply.patch").is_symlink()
    assert (scratch / "model-apply.patch").read_bytes() == b"patch"


def test_a_hard_link_is_cut_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's file")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.link(victim, scratch / "traces.jsonl")
    safe_files.write_bytes(scratch, "traces.jsonl", b"{}")
    assert victim.read_text() == "root's file"


def test_a_linked_folder_on_the_way_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "site-packages"
    elsewhere.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "plugin").symlink_to(elsewhere)
    with pytest.raises(UnsafePath):
        safe_files.write_bytes(scratch, "plugin/evil.pth", b"import os")
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(UnsafePath):
        safe_files.read_bytes(scratch, "plugin/x")


def test_reading_a_link_or_a_fifo_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s")
    (tmp_path / "results.jsonl").symlink_to(tmp_path / "secret")
    with pytest.raises(UnsafePath):
        safe_files.read_bytes(tmp_path, "results.jsonl")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UnsafePath):
        safe_files.read_bytes(tmp_path, "fifo")


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", ""])
def test_paths_that_leave_the_base_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(UnsafePath):
        safe_files.write_bytes(tmp_path, bad, b"")


def test_a_file_over_max_size_is_refused_before_it_is_read(tmp_path: Path) -> None:
    safe_files.write_bytes(tmp_path, "big.patch", b"x" * 100)
    assert safe_files.read_bytes(tmp_path, "big.patch", max_size=100) == b"x" * 100
    with pytest.raises(safe_files.TooLarge) as caught:
        safe_files.read_bytes(tmp_path, "big.patch", max_size=99)
    assert (caught.value.size, caught.value.limit) == (100, 99)


def test_a_log_within_the_limit_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "h.stdout").write_bytes(b"x" * 4096)
    assert safe_files.read_log(tmp_path, "h.stdout", limit=4096) == b"x" * 4096
    assert safe_files.read_log(tmp_path, "missing", limit=4096) is None
    assert safe_files.read_log_file(tmp_path / "missing", limit=4096) == b""


def test_a_long_log_keeps_its_head_and_tail_and_says_what_it_dropped(tmp_path: Path) -> None:
    size, limit = 10_000_000, 8192
    with open(tmp_path / "h.stdout", "wb") as f:
        f.write(b"HEAD")
        f.write(b"m" * (size - 8))
        f.write(b"TAIL")
    data = safe_files.read_log(tmp_path, "h.stdout", limit=limit)
    assert data is not None
    note = safe_files.truncation_note(size - limit, size, limit)
    assert b"truncated: 9991808 bytes dropped" in note
    assert data == b"HEAD" + b"m" * 1020 + note + b"m" * (7168 - 4) + b"TAIL"
    assert len(data) == limit + len(note)


def test_a_log_that_is_a_link_or_a_fifo_is_a_note_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root's secret")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "h.stdout").symlink_to(secret)
    os.mkfifo(logs / "h.stderr")  # would block a plain read
    for name in ("h.stdout", "h.stderr"):
        with pytest.raises(UnsafePath):
            safe_files.read_log(logs, name, limit=4096)
        note = safe_files.read_log_file(logs / name, limit=4096)
        assert note.startswith(b"[polar: log not read: ") and b"root's" not in note

"""polar/safe_files.py: a planted symlink anywhere on the path is refused, never followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polar import safe_files
from polar.safe_files import UnsafePath


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

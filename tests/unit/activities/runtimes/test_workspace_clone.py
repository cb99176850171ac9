"""A git source cloned from a path on the worker host shares nothing with it: the local
runtime hands its workspace to the sandbox user, which must never reach the source's files
(nor, through them, every other session cloned from the same source)."""

from __future__ import annotations

from pathlib import Path

from activities.runtimes.workspace import materialise_source
from polar.tasks.spec import GitSource
from tests.support.git import git


def test_a_local_clone_shares_no_file_with_its_source(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_text("a\n")
    for args in (["init", "-q"], ["add", "f.txt"], ["commit", "-qm", "x"]):
        git(src, *args)
    workspace = tmp_path / "workspace"
    materialise_source(GitSource(url=str(src)), workspace)
    objects = [p for p in (src / ".git" / "objects").rglob("*") if p.is_file()]
    assert objects
    for source_file in objects:
        copy = workspace / source_file.relative_to(src)
        if copy.exists():
            assert copy.stat().st_ino != source_file.stat().st_ino, copy
    assert (workspace / "f.txt").read_text() == "a\n"

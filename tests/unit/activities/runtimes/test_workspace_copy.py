"""The worker's copy of a workspace (activities/runtimes/workspace.py) takes whatever
tree the harness left without failing the stage: a FIFO is left out (never read), links stay
links, a tree deeper than Python's recursion limit is copied, and of `.git` only its objects
(no alternates) and index arrive."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from activities.runtimes.workspace import copy_workspace_dir


def test_what_the_harness_left_is_copied_or_named(tmp_path: Path) -> None:
    ws, dest = tmp_path / "ws", tmp_path / "copy"
    ws.mkdir()
    dest.mkdir()
    (ws / "fix.py").write_text("x = 1\n")
    os.mkfifo(ws / "pipe")
    (ws / "link").symlink_to("/etc/shadow")
    depth = sys.getrecursionlimit() + 200
    deep = str(ws)
    for _ in range(depth):  # os.makedirs itself recurses
        deep += "/d"
        os.mkdir(deep)
    Path(deep, "bottom.txt").write_text("deep\n")
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "big.js").write_text("junk\n")
    git = ws / ".git"
    (git / "objects" / "info").mkdir(parents=True)
    (git / "objects" / "info" / "alternates").write_text("/elsewhere/objects\n")
    (git / "index").write_bytes(b"DIRC")
    (git / "config").write_text('[filter "x"]\n\tclean = evil\n')

    skipped = copy_workspace_dir(ws, dest, junk={"node_modules"})

    assert skipped == ["pipe"]
    assert (dest / "fix.py").read_text() == "x = 1\n"
    assert os.readlink(dest / "link") == "/etc/shadow"  # a link, never followed
    assert os.path.exists(str(dest) + "/d" * depth + "/bottom.txt")
    assert not (dest / "node_modules").exists()
    assert (dest / ".git" / "index").read_bytes() == b"DIRC"
    assert not (dest / ".git" / "config").exists()
    assert not (dest / ".git" / "objects" / "info" / "alternates").exists()

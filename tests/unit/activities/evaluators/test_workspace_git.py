"""An evaluator's git work on the worker's copy of a container's workspace
(activities/evaluators/workspace_git.py `CopyGit`): the workspace ends as the runtime's own
git would leave it, only what changed is put back, and nothing the session planted in the
copy (a link out of it) makes the worker read, remove or upload a file of its own."""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

import pytest

from activities.evaluators.base import EvaluatorError
from activities.evaluators.patches import APPLY_STRATEGIES
from activities.evaluators.swebench.commands import check_workspace_command
from activities.evaluators.workspace_git import (
    CopyGit,
    changed_entries,
    entries,
    remove_entry,
    workspace_git,
)
from activities.runtimes.base import WorkspaceWriter
from polar.contracts import RuntimeHandle
from tests.support.git import git

TEST_PATCH = """diff --git a/tests/test_new.py b/tests/test_new.py
new file mode 100644
--- /dev/null
+++ b/tests/test_new.py
@@ -0,0 +1 @@
+def test_new(): pass
"""


class DirRuntime:
    """A WorkspaceWriter whose workspace is a folder (a container's, as the engine's archive
    copies and fills it): what it was asked to put and remove is recorded."""

    kind = "docker"

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.copies = 0
        self.puts: list[tuple[list[str], list[str]]] = []

    async def copy_workspace(
        self, handle: RuntimeHandle, dest: Path, junk: Collection[str] = ()
    ) -> list[str]:
        self.copies += 1
        shutil.copytree(self.workspace, dest, symlinks=True, dirs_exist_ok=True)
        return []

    async def put_workspace(
        self, handle: RuntimeHandle, src: Path, paths: Sequence[str], removed: Sequence[str]
    ) -> None:
        self.puts.append((list(paths), list(removed)))
        for rel in removed:  # here the worker's own disk: never through a link
            remove_entry(self.workspace, rel)
        for rel in paths:  # one entry each, never recursively, never through a link of src
            entry, target = src / rel, self.workspace / rel
            if entry.is_symlink():
                if target.exists() or target.is_symlink():
                    target.unlink()
                target.symlink_to(os.readlink(entry))
            elif entry.is_dir():
                target.mkdir(exist_ok=True)
            else:
                target.write_bytes(entry.read_bytes())


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A workspace with one commit (a package, a setup.cfg and a test file)."""
    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "pkg.py").write_text("X = 1\n")
    (ws / "setup.cfg").write_text("[tool:pytest]\naddopts = -q\n")
    (ws / "tests" / "test_a.py").write_text("def test_a(): pass\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        git(ws, *args)
    return ws, git(ws, "rev-parse", "HEAD")


@pytest.fixture
def settings_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    from polar.settings import WorkerSettings, get_settings

    data = tmp_path / "data"
    monkeypatch.setenv("POLAR_DATA_DIR", str(data))
    get_settings.cache_clear()
    assert get_settings(WorkerSettings).data_dir == data
    yield data
    get_settings.cache_clear()


HANDLE = RuntimeHandle(kind="docker", session_id="s-eval", workdir="/workspace", host="h")


def test_entries_never_go_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("x")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "f").write_text("outside")
    (tmp_path / "a" / "link").symlink_to(tmp_path / "out")
    found = entries(tmp_path, ["a/b/f", "a/link/f", "a/missing/g", "../out/f", "/etc/passwd"])
    assert found == {"a": "d", "a/b": "d", "a/b/f": "f", "a/link": "l"}


def test_changed_entries_new_parents_first_removed_and_changed_kinds() -> None:
    before = {"kept.txt": "f", "gone.txt": "f", "x": "f"}
    after = {"kept.txt": "f", "new": "d", "new/sub": "d", "new/sub/f.py": "f", "x": "d"}
    after["x/y"] = "f"
    touched = ["new/sub/f.py", "kept.txt", "gone.txt", "x/y", "nowhere.txt"]
    put, removed = changed_entries(before, after, touched)
    assert put == ["kept.txt", "new", "new/sub", "new/sub/f.py", "x", "x/y"]
    assert removed == ["gone.txt", "nowhere.txt", "x"]  # x: a file, a folder now


def test_remove_entry_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.py").write_text("keep me\n")
    top = tmp_path / "copy"
    (top / "d").mkdir(parents=True)
    (top / "d" / "f").write_text("x")
    (top / "tests2").symlink_to(outside)
    remove_entry(top, "tests2/victim.py")
    assert (outside / "victim.py").read_text() == "keep me\n"
    remove_entry(top, "tests2")  # the link itself goes, not what it names
    assert not (top / "tests2").is_symlink() and (outside / "victim.py").exists()
    remove_entry(top, "d")
    assert not (top / "d").exists()
    with pytest.raises(EvaluatorError, match="not a plain relative path"):
        remove_entry(top, "../outside/victim.py")


async def test_the_evaluators_steps_on_a_copy(repo: tuple[Path, str], settings_dir: Path) -> None:
    ws, base = repo
    runtime = DirRuntime(ws)
    assert isinstance(runtime, WorkspaceWriter)
    async with workspace_git(runtime, HANDLE) as git_:  # type: ignore[arg-type]
        assert isinstance(git_, CopyGit) and runtime.copies == 0  # made when first used
        code, log = await git_.read_only(check_workspace_command(base), "check")
        assert code == 0, log
        code, _ = await git_.read_only(check_workspace_command("f" * 40), "check")
        assert code != 0
        # the session's patch: a change, a new file, the pytest section changed
        session = (
            b"diff --git a/pkg.py b/pkg.py\n--- a/pkg.py\n+++ b/pkg.py\n"
            b"@@ -1 +1 @@\n-X = 1\n+X = 2\n"
            b"diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n"
            b"@@ -0,0 +1 @@\n+Y = 1\n"
            b"diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n"
            b"@@ -1,2 +1,2 @@\n [tool:pytest]\n-addopts = -q\n+addopts = -p no:x\n"
        )
        strategy, attempts = await git_.apply(session, name="model", reset_to=base, timeout_s=60)
        assert strategy == "git apply", attempts
        assert runtime.puts[-1] == (["new.py", "pkg.py", "setup.cfg"], [])
        assert (ws / "pkg.py").read_text() == "X = 2\n" and (ws / "new.py").exists()
        # the pytest section: its base and current content
        ((before, after),) = await git_.versions(base, ["setup.cfg"])
        assert before == b"[tool:pytest]\naddopts = -q\n"
        assert after == b"[tool:pytest]\naddopts = -p no:x\n"
        code, log = await git_.restore(base, ["setup.cfg", "new.py"], "restore")
        assert code == 0, log
        assert (ws / "setup.cfg").read_text() == "[tool:pytest]\naddopts = -q\n"
        assert not (ws / "new.py").exists()  # not at base: removed
        assert runtime.puts[-1] == (["setup.cfg"], ["new.py"])
        # a patch applied on a changed copy gets one strategy; a failing one changes nothing
        with pytest.raises(ValueError, match="one strategy"):
            await git_.apply(b"x", name="t", reset_to=base, timeout_s=60)
        bad = TEST_PATCH.replace("new file mode 100644\n--- /dev/null", "--- a/tests/test_new.py")
        strategy, _ = await git_.apply(
            bad.encode(), name="t", reset_to=base, timeout_s=60, strategies=APPLY_STRATEGIES[:1]
        )
        assert strategy is None and (ws / "pkg.py").read_text() == "X = 2\n"
        strategy, attempts = await git_.apply(
            TEST_PATCH.encode(),
            name="test",
            reset_to=base,
            timeout_s=60,
            strategies=APPLY_STRATEGIES[:1],
        )
        assert strategy == "git apply", attempts
        assert (ws / "tests" / "test_new.py").read_text() == "def test_new(): pass\n"
        code, _ = await git_.remove(["pkg.py"], "shadows")
        assert code == 0 and not (ws / "pkg.py").exists()
    assert runtime.copies == 1  # one copy for every step
    assert not list((settings_dir / "worker-git").iterdir())  # removed after


async def test_a_link_the_session_planted_is_never_followed_on_the_worker(
    repo: tuple[Path, str], settings_dir: Path, tmp_path: Path
) -> None:
    """The session's patch makes `tests2` a link to a folder of the worker's and
    `setup.cfg` a link to a secret: resetting `tests2/test_new.py` (absent at base) removes
    nothing there, the secret is never read, and nothing of the worker's is put back."""
    ws, base = repo
    outside = tmp_path / "worker-files"
    outside.mkdir()
    (outside / "test_new.py").write_text("the worker's\n")
    (outside / "secret").write_text("SECRET\n")
    runtime = DirRuntime(ws)
    session = (
        f"diff --git a/tests2 b/tests2\nnew file mode 120000\n--- /dev/null\n+++ b/tests2\n"
        f"@@ -0,0 +1 @@\n+{outside}\n\\ No newline at end of file\n"
        "diff --git a/setup.cfg b/setup.cfg\ndeleted file mode 100644\n--- a/setup.cfg\n"
        "+++ /dev/null\n@@ -1,2 +0,0 @@\n-[tool:pytest]\n-addopts = -q\n"
        f"diff --git a/setup.cfg b/setup.cfg\nnew file mode 120000\n--- /dev/null\n"
        f"+++ b/setup.cfg\n@@ -0,0 +1 @@\n+{outside}/secret\n\\ No newline at end of file\n"
    ).encode()
    async with workspace_git(runtime, HANDLE) as git_:  # type: ignore[arg-type]
        strategy, attempts = await git_.apply(session, name="model", reset_to=base, timeout_s=60)
        assert strategy is not None, attempts
        assert (ws / "tests2").is_symlink()
        ((_, now),) = await git_.versions(base, ["setup.cfg"])
        assert isinstance(now, str) and "link" in now  # why it was not read
        code, log = await git_.restore(base, ["tests2/test_new.py", "setup.cfg"], "reset")
        assert code == 0, log
        assert (outside / "test_new.py").read_text() == "the worker's\n"
        assert (ws / "setup.cfg").read_text() == "[tool:pytest]\naddopts = -q\n"
        put, removed = runtime.puts[-1]
        # the link setup.cfg is taken out before the file goes in
        assert put == ["setup.cfg"] and removed == ["setup.cfg", "tests2/test_new.py"]
    assert (outside / "secret").read_text() == "SECRET\n"


async def test_the_command_evaluators_named_files_are_listed_only_where_the_patch_has_them(
    repo: tuple[Path, str], settings_dir: Path
) -> None:
    """`command_files` lists, at base, only the named files a patch path matches: a patch
    that touches none of them needs no listing (and no copy of the workspace)."""
    from activities.evaluators.command.evaluator import command_files

    ws, base = repo
    runtime = DirRuntime(ws)
    command = "python -m pytest tests/test_a.py tests/test_new.py && sh run.sh"
    async with workspace_git(runtime, HANDLE) as git_:  # type: ignore[arg-type]
        assert await command_files(git_, command, "/workspace", base, ["pkg.py"]) == []
        assert runtime.copies == 0
        touched = ["tests/test_a.py", "tests/test_new.py", "run.sh", "pkg.py"]
        # named and at base: protected; named but new (the session's to write): not
        assert await command_files(git_, command, "/workspace", base, touched) == [
            "tests/test_a.py"
        ]
        assert runtime.copies == 1

"""The worker's own git on a copy of a container's workspace (activities/evaluators/
worker_git.py) reads nothing of the task's: a filter or hook the image's `.git` names never
runs on the worker, and the baseline is the one the in-sandbox script makes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from activities.evaluators.baseline import IDENTITY, baseline_script
from activities.evaluators.worker_git import WorkerGitFailed, _run_git, _tame_git


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env=IDENTITY
        | {"PATH": "/usr/bin:/bin", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(cwd)},
    )


async def test_a_filter_and_a_hook_of_the_images_git_never_run_on_the_worker(
    tmp_path: Path,
) -> None:
    pwned = tmp_path / "pwned"
    copy = tmp_path / "w" / "workspace"
    copy.mkdir(parents=True)
    (copy / "a.txt").write_text("a\n")
    _git(copy, "init", "-q")
    _git(copy, "add", "a.txt")
    _git(copy, "commit", "-qm", "one")
    with (copy / ".git" / "config").open("a") as config:  # what a task's image could leave
        config.write(f'[filter "evil"]\n\tclean = touch {pwned}; cat\n')
        config.write(f"[core]\n\tfsmonitor = touch {pwned}\n")
    (copy / ".gitattributes").write_text("* filter=evil\n")
    hook = copy / ".git" / "hooks" / "post-index-change"
    hook.write_text(f"#!/bin/sh\ntouch {pwned}\n")
    hook.chmod(0o755)
    (copy / "b.txt").write_text("b\n")  # a change prepare made: a commit on top of HEAD
    _tame_git(copy / ".git")
    assert not (copy / ".git" / "hooks").exists()
    code, output = await _run_git(
        copy, baseline_script(str(tmp_path / "w" / "idx")), IDENTITY, 60, None
    )
    assert code == 0, output
    assert "polar-baseline=" in output and not pwned.exists()


def test_a_git_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".git").write_text("gitdir: /elsewhere\n")
    with pytest.raises(WorkerGitFailed, match="not a directory"):
        _tame_git(tmp_path / ".git")

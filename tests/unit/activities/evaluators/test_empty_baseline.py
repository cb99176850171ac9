"""An empty local workspace's baseline repository, written by the worker without a process:
the same commit, refs and files git itself makes, owned by the harness user, usable by git."""

from __future__ import annotations

import os
import pwd
import subprocess
import uuid
from pathlib import Path

import pytest

from activities.evaluators.base import run_in
from activities.evaluators.baseline import (
    BASELINE_REF,
    IDENTITY,
    BaselineFailed,
    baseline_script,
    empty_baseline_commit,
    record_baseline,
    write_empty_repo,
)
from activities.runtimes.kinds.local import LocalRuntime
from activities.runtimes.sandboxes.local_sandbox import HARNESS_USER
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.tasks.spec import RuntimeSpec

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the sealed sandbox needs a root worker (CI runs as root)"
)


def _git(workspace: Path, *args: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(workspace.parent), **IDENTITY}
    return subprocess.run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


async def _prepare(runtime: LocalRuntime, prepare: list[dict] | None = None) -> RuntimeHandle:
    spec = RuntimeSpec.model_validate({"kind": "local", "prepare": prepare or []})
    request = PrepareRequest(
        session_id=f"empty-{uuid.uuid4().hex[:8]}", task_id="t", runtime=spec, source=None
    )
    return await runtime.prepare(request)


async def test_the_worker_writes_what_git_writes(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "runtimes")
    fast, slow = await _prepare(runtime), await _prepare(runtime)
    try:
        fast = await record_baseline(runtime, fast)
        # the other one through the script git runs in the sandbox, as a non-empty one would
        index = str(runtime.scratch(slow) / "baseline.index")
        code, _, output = await run_in(
            runtime, slow, baseline_script(index), "baseline", 60, env=IDENTITY
        )
        assert code == 0, output
        assert f"polar-baseline={fast.baseline}" in output
        assert fast.baseline == empty_baseline_commit()[0]
        ours, gits = Path(fast.workdir), Path(slow.workdir)
        for workspace in (ours, gits):
            assert _git(workspace, "rev-parse", "HEAD", BASELINE_REF).split() == [fast.baseline] * 2
            assert _git(workspace, "symbolic-ref", "HEAD") == "refs/heads/main\n"
            assert _git(workspace, "status", "--porcelain") == ""
        assert _git(ours, "cat-file", "-p", "HEAD") == _git(gits, "cat-file", "-p", "HEAD")
        assert (ours / ".git" / "config").read_text() == (gits / ".git" / "config").read_text()
        _git(ours, "fsck", "--strict", "--no-dangling")
        made = {p.relative_to(ours) for p in (ours / ".git").rglob("*")}
        assert made <= {p.relative_to(gits) for p in (gits / ".git").rglob("*")}
        uid = ours.stat().st_uid  # the session's pool user
        assert uid != pwd.getpwnam(HARNESS_USER).pw_uid
        assert {(ours / p).lstat().st_uid for p in made} == {uid}
        # the harness works on it as on git's own: a commit on top, the baseline unmoved
        command = "echo x > f && git add f && git -c user.name=h -c user.email=h@h commit -qm h"
        code, _, output = await run_in(runtime, fast, command, "harness", 60)
        assert code == 0, output
        assert _git(ours, "rev-parse", "HEAD~1", BASELINE_REF).split() == [fast.baseline] * 2
    finally:
        await runtime.teardown(fast)
        await runtime.teardown(slow)


async def test_a_workspace_a_prepare_action_wrote_goes_through_git(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "runtimes")
    handle = await _prepare(runtime, [{"type": "run", "command": "echo built > out.txt"}])
    try:
        assert await runtime.init_empty_workspace(handle, write_empty_repo) is None
        assert not (Path(handle.workdir) / ".git").exists(), "nothing is written when not empty"
        handle = await record_baseline(runtime, handle)
        assert handle.baseline and handle.baseline != empty_baseline_commit()[0]
        files = _git(Path(handle.workdir), "ls-tree", "--name-only", handle.baseline).split()
        assert files == ["out.txt"]
    finally:
        await runtime.teardown(handle)


def test_write_empty_repo_refuses_a_folder_with_files(tmp_path: Path) -> None:
    (tmp_path / "planted").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        write_empty_repo(tmp_path)
    assert not (tmp_path / ".git").exists()


async def test_a_baseline_git_cannot_make_fails_prepare(tmp_path: Path) -> None:
    """Git is in every runtime (checked at prepare), so a baseline that cannot be made is the
    host's fault (a full disk, say): prepare fails, never a workspace the evaluator would
    later blame on the task."""
    runtime = LocalRuntime(tmp_path / "runtimes")
    broken = "echo x > out.txt && echo 'gitdir: /nonexistent/polar' > .git"
    handle = await _prepare(runtime, [{"type": "run", "command": broken}])
    try:
        with pytest.raises(BaselineFailed, match="baseline"):
            await record_baseline(runtime, handle)
    finally:
        await runtime.teardown(handle)

"""The worker's own checks on what a task makes it read: host paths resolved, git arguments.

TaskSpec refuses these at submit (tests/integration/test_task_validation.py); the worker
checks again right before it reads, where a symlink or a spec built without
validation (`model_construct`) would slip past the TaskSpec.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.runtimes import InvalidRuntime, InvalidSource
from activities.runtimes.kinds.local import LocalRuntime
from activities.runtimes.workspace import _git as _git_call
from activities.runtimes.workspace import git_error, materialise_source
from polar.client.sdk import PolarClient
from polar.contracts import PrepareRequest
from polar.host_paths import source_roots
from polar.tasks.spec import DirSource, GitSource, RuntimeSpec, TaskSpec


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A local repository: main (a.txt = one), branch `feature` and tag `v1` (a.txt = two)."""
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.email", "t@example.com")
    _git(path, "config", "user.name", "t")
    (path / "a.txt").write_text("one\n")
    _git(path, "add", ".")
    _git(path, "commit", "-qm", "one")
    _git(path, "checkout", "-qb", "feature")
    (path / "a.txt").write_text("two\n")
    _git(path, "commit", "-qam", "two")
    _git(path, "tag", "v1")
    _git(path, "checkout", "-q", "main")
    return path


def test_a_local_git_source_clones_at_a_branch_or_tag(repo: Path, tmp_path: Path) -> None:
    for ref, content in ((None, "one\n"), ("feature", "two\n"), ("v1", "two\n")):
        workspace = tmp_path / f"ws-{ref}"
        materialise_source(GitSource(url=str(repo), ref=ref), workspace)
        assert (workspace / "a.txt").read_text() == content


def test_git_options_in_url_or_ref_never_run(repo: Path, tmp_path: Path) -> None:
    """Specs built without validation: `--` keeps the url an argument, the ref is checked
    before git runs, and the ext transport is off."""
    marker = tmp_path / "pwned"
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-LINE\n")
    for url in (f"--upload-pack=touch {marker}", f"ext::sh -c touch% {marker}"):
        with pytest.raises(InvalidSource, match="failed"):
            materialise_source(GitSource.model_construct(url=url, ref=None), tmp_path / "w1")
    assert not marker.exists()
    bad_ref = GitSource.model_construct(url=str(repo), ref=f"--pathspec-from-file={secret}")
    with pytest.raises(InvalidSource, match="starts with '-'") as info:
        materialise_source(bad_ref, tmp_path / "w2")
    assert "TOP-SECRET" not in str(info.value)


@pytest.mark.parametrize("kind", ["dir", "git"])
def test_a_source_symlinked_to_a_system_dir_is_refused(kind: str, tmp_path: Path) -> None:
    link = tmp_path / "innocent"
    link.symlink_to("/etc")
    source = DirSource(path=str(link)) if kind == "dir" else GitSource(url=str(link))
    with pytest.raises(InvalidSource, match="resolves to /etc, in the system directory /etc"):
        materialise_source(source, tmp_path / "workspace")
    assert not (tmp_path / "workspace").exists()


def test_a_source_inside_the_runtimes_root_is_refused(tmp_path: Path) -> None:
    """Another session's workspace (or channel) is not a source."""
    other = tmp_path / "runtimes" / "other-session" / "workspace"
    other.mkdir(parents=True)
    with pytest.raises(InvalidSource, match="inside"):
        materialise_source(
            DirSource(path=str(other)), tmp_path / "workspace", (tmp_path / "runtimes",)
        )


async def test_an_upload_symlinked_to_a_system_file_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "src"
    repo.mkdir()
    link = tmp_path / "notes.txt"
    link.symlink_to("/etc/hostname")
    runtime = LocalRuntime(tmp_path / "runtimes")
    request = PrepareRequest(
        session_id="s-upload",
        task_id="t",
        runtime=RuntimeSpec.model_validate(
            {"prepare": [{"type": "upload", "src": str(link), "dest": "notes.txt"}]}
        ),
        source=DirSource(path=str(repo)),
    )
    with pytest.raises(InvalidRuntime, match="src .*notes.txt resolves to /etc/hostname"):
        await runtime.prepare(request)
    assert not (tmp_path / "runtimes" / "s-upload" / "workspace" / "notes.txt").exists()


def test_a_git_error_is_only_gits_first_error_line(repo: Path, tmp_path: Path) -> None:
    """A failed git call's message is git's own first error line, never what else it
    printed (with an option in a ref, git once quoted a host file line by line)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("".join(f"SECRET-{i}\n" for i in range(20)))
    with pytest.raises(InvalidSource) as info:  # what the ref check now keeps from running
        _git_call(["checkout", "--quiet", f"--pathspec-from-file={secret}"], repo)
    message = str(info.value)
    assert "\n" not in message and message.startswith("git checkout failed: error: pathspec")
    assert sum(f"SECRET-{i}" in message for i in range(20)) <= 1
    with pytest.raises(InvalidSource) as info:
        materialise_source(GitSource(url=str(repo), ref="no-such-ref"), tmp_path / "w")
    assert str(info.value) == ("git checkout failed: fatal: invalid reference: no-such-ref")
    with pytest.raises(InvalidSource) as info:
        materialise_source(GitSource(url=str(tmp_path / "missing")), tmp_path / "w2")
    assert "\n" not in str(info.value) and str(info.value).startswith("git clone failed: fatal:")


def test_git_error_masks_url_credentials() -> None:
    stderr = "Cloning...\nfatal: unable to access 'https://bob:tok3n@example.com/r.git/': 403\n"
    assert git_error(stderr) == "fatal: unable to access 'https://***@example.com/r.git/': 403"
    assert git_error("") == "no error output"


# ---------------------------------------------------------------- POLAR_SOURCE_ROOTS


@pytest.fixture
def outside_dir() -> Iterator[Path]:
    """A readable directory outside the suite's source roots (pytest's temp dirs, the
    checkout): what a task must not make the worker read."""
    path = Path(tempfile.mkdtemp(prefix="polar-outside-", dir="/var/tmp"))
    (path / "secret.txt").write_text("OUTSIDE-THE-ROOTS\n")
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_source_roots_default_to_the_working_directory_and_never_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    assert source_roots(None) == (tmp_path.resolve(),)
    assert source_roots(f" {tmp_path} ,/srv ") == (tmp_path.resolve(), Path("/srv"))
    with pytest.raises(ValueError, match="may not contain /"):
        source_roots("/srv,/")


@pytest.mark.parametrize("field", ["source.path", "git url", "upload src"])
async def test_a_task_reading_outside_the_source_roots_is_refused(
    polar: PolarClient, outside_dir: Path, tmp_path: Path, field: str
) -> None:
    inside = tmp_path / "repo"
    inside.mkdir()
    (inside / "README").write_text("inside\n")
    spec: dict[str, Any] = {
        "task_id": f"roots-{uuid.uuid4().hex[:6]}",
        "source": {"type": "dir", "path": str(inside)},
        "harness": {"command": "cat secret.txt || true"},
        "timeouts": {"heartbeat_s": 5},
    }
    if field == "source.path":
        spec["source"] = {"type": "dir", "path": str(outside_dir)}
    elif field == "git url":
        spec["source"] = {"type": "git", "url": str(outside_dir)}
    else:
        upload = {"type": "upload", "src": str(outside_dir / "secret.txt"), "dest": "secret.txt"}
        spec["runtime"] = {"kind": "local", "prepare": [upload]}
    result = await polar.wait(await polar.submit(TaskSpec.model_validate(spec)), timeout_s=120)
    (session,) = result.sessions
    assert session.status == "error"
    assert "outside the source roots" in (session.error or ""), session.error
    assert "OUTSIDE-THE-ROOTS" not in (session.error or "")
    assert session.num_completions == 0

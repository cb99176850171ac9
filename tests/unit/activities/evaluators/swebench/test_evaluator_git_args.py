"""The evaluator's git calls read a base commit as a revision, never as an option: each
command it builds runs here on a real git repository with a base such as `--output=FILE`,
and the worker itself refuses such a base before any git call (issue 10, item 5)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.evaluators.patches import checked_base_commit, extract_command, extract_patch
from activities.evaluators.swebench import check_workspace_command, evaluate_swebench
from activities.evaluators.swebench.config import SweBenchConfig
from activities.evaluators.workspace_git import restore_command, versions_command
from activities.runtimes.kinds.local import LocalRuntime
from polar.contracts import NON_RETRYABLE_ERRORS, RuntimeHandle
from polar.tasks.spec import CommandAction, EvaluatorSpec, RuntimeSpec
from tests.support.git import git

SECRET = "TOP-SECRET-LINE-7f3a"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit (a file, a setup.cfg, a test file) and a change."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "a.txt").write_text("a\n")
    (repo / "setup.cfg").write_text("[tool:pytest]\naddopts = -q\n")
    (repo / "tests" / "test_a.py").write_text("def test_a():\n    assert True\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        git(repo, *args)
    (repo / "a.txt").write_text("a\nchanged\n")
    return repo


@pytest.fixture
def trap(tmp_path: Path) -> Path:
    """A folder git must not write into, and a secret file beside it git must not read."""
    (tmp_path / "trap").mkdir()
    (tmp_path / "secret.txt").write_text(SECRET + "\n")
    return tmp_path / "trap"


def _bash(repo: Path, command: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run(
        ["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True, timeout=60
    )


def _dangerous(trap: Path) -> list[str]:
    secret = trap.parent / "secret.txt"
    return [
        f"--output={trap}/out",  # diff / show write their output there
        f"--index-output={trap}/index",  # read-tree writes an index there
        f"--pathspec-from-file={secret}",  # checkout reads paths (and echoes them) from it
    ]


def _eval_checkout(base: str) -> str:
    """The checkout command line the evaluator's fresh runtime runs while preparing."""
    swebench = {"instance_id": "i", "base_commit": base, "fail_to_pass": ["t"]}
    spec = EvaluatorSpec.model_construct(kind="swebench", swebench=swebench)  # unchecked
    action = spec.eval_runtime_spec(RuntimeSpec()).prepare[-1]
    assert isinstance(action, CommandAction)
    return action.command


def _commands(base: str, tmp_path: Path) -> dict[str, str]:
    """Each git call that takes the base commit, as its own command line (the extract
    script's lines one at a time, so no earlier line stands guard for a later one)."""
    extract = extract_command(base, str(tmp_path / "xgit"), str(tmp_path / "model.patch"))
    script = extract.splitlines()
    at = [i for i, line in enumerate(script) if base in line]
    assert len(at) == 3  # cat-file, read-tree, diff (its options on the line before)
    lines = [script[i] for i in at]
    return {
        "extract cat-file": lines[0],
        "extract read-tree": lines[1],
        "extract diff": f"export GIT_INDEX_FILE={tmp_path}/idx gd={tmp_path}\n"
        + "\n".join(script[at[2] - 1 : at[2] + 1]),
        "check workspace": check_workspace_command(base),
        "read config": versions_command(base, ["setup.cfg"], tmp_path / "config"),
        "restore config": restore_command(base, ["setup.cfg"]),
        "reset test files": restore_command(base, ["tests/test_a.py"]),
        "reset on a copy": restore_command(base, ["tests/test_a.py"], tmp_path / "absent"),
        "eval checkout": _eval_checkout(base),
    }


def test_each_git_call_reads_the_base_as_a_revision(repo: Path, trap: Path, tmp_path: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    (repo / "tests" / "test_a.py").write_text("changed by the patch\n")
    problems = []
    for base in _dangerous(trap):
        for name, command in _commands(base, tmp_path).items():
            done = _bash(repo, command, tmp_path)
            output = done.stdout + done.stderr
            if written := sorted(p.name for p in trap.iterdir()):
                problems.append(f"{name} wrote {written} for {base!r}")
                for path in trap.iterdir():
                    path.unlink()
            if SECRET in output:
                problems.append(f"{name} read the secret for {base!r}: {output[-300:]}")
            if name == "read config":  # a file the base lacks is no error: no .base copy
                if (tmp_path / "config" / "0.base").exists():
                    problems.append(f"{name} copied something for {base!r}")
            elif done.returncode == 0:
                problems.append(f"{name} accepted {base!r}: {output[-300:]}")
            elif base not in output:
                problems.append(f"{name}: the error does not name {base!r}: {output[-300:]}")
            # nothing moved: HEAD, the workspace's files and the session's own index
            test_file = repo / "tests" / "test_a.py"
            if not test_file.exists() or test_file.read_text() != "changed by the patch\n":
                problems.append(f"{name} changed the workspace for {base!r}")
                test_file.write_text("changed by the patch\n")
            assert git(repo, "rev-parse", "HEAD") == head
            assert git(repo, "diff", "--cached", "--name-only") == ""
    assert not problems, "\n".join(problems)


def test_the_commands_still_work_with_a_real_base(repo: Path, trap: Path, tmp_path: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    (repo / "tests" / "test_a.py").write_text("changed by the patch\n")
    (repo / "setup.cfg").write_text("[tool:pytest]\naddopts = -p no:tests\n")
    commands = _commands(head, tmp_path)
    for name in ("extract cat-file", "extract read-tree", "check workspace"):
        done = _bash(repo, commands[name], tmp_path)
        assert done.returncode == 0, f"{name}: {done.stderr}"
    done = _bash(repo, extract_command(head, str(tmp_path / "i2"), str(trap / "p")), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "+changed" in (trap / "p").read_text()
    assert _bash(repo, commands["read config"], tmp_path).returncode == 0
    assert (tmp_path / "config" / "0.base").read_text() == "[tool:pytest]\naddopts = -q\n"
    assert _bash(repo, commands["restore config"], tmp_path).returncode == 0
    assert (repo / "setup.cfg").read_text() == "[tool:pytest]\naddopts = -q\n"
    assert _bash(repo, commands["reset test files"], tmp_path).returncode == 0
    assert (repo / "tests" / "test_a.py").read_text().startswith("def test_a")
    # the fresh runtime's checkout: a no-op on the base, a checkout from elsewhere
    assert _bash(repo, commands["eval checkout"], tmp_path).returncode == 0
    git(repo, "commit", "-qam", "later")
    assert git(repo, "rev-parse", "HEAD") != head
    done = _bash(repo, commands["eval checkout"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert git(repo, "rev-parse", "HEAD") == head


@pytest.mark.parametrize("base", ["--output=/tmp/gaps10-x", "-p", "", "--end-of-options"])
def test_worker_refuses_a_base_commit_git_reads_as_an_option(base: str) -> None:
    with pytest.raises(ApplicationError) as caught:
        checked_base_commit(base)
    assert caught.value.non_retryable
    assert caught.value.type == "EvaluatorError" and caught.value.type in NON_RETRYABLE_ERRORS
    assert "git would read it as an option" in str(caught.value)
    assert checked_base_commit("a894d21f") == "a894d21f"


async def test_extract_and_evaluate_refuse_it_before_any_git_call(
    repo: Path, trap: Path, tmp_path: Path
) -> None:
    runtime = LocalRuntime(tmp_path / "runtimes")
    handle = RuntimeHandle(kind="local", session_id="s1", workdir=str(repo), host="localhost")
    base = f"--output={trap}/out"
    with pytest.raises(ApplicationError, match="starts with '-'") as caught:
        await extract_patch(runtime, handle, base)
    assert caught.value.non_retryable and caught.value.type == "EvaluatorError"
    spec = SweBenchConfig.model_construct(
        instance_id="i", base_commit=base, test_patch="", fail_to_pass=["t"], exclude=[]
    )
    with pytest.raises(ApplicationError, match="starts with '-'"):
        await evaluate_swebench(runtime, handle, runtime, handle, spec, timeout_s=60)
    assert list(trap.iterdir()) == []
    assert not (tmp_path / "runtimes").exists() or not any((tmp_path / "runtimes").rglob("*"))


def test_the_eval_checkout_on_an_image_without_git(repo: Path, trap: Path, tmp_path: Path) -> None:
    """With no git on PATH (a stock image), the checkout reads HEAD from `.git` with sh alone:
    HEAD on a branch (a loose or a packed ref) or detached at the base passes, another base
    (or one git would read as an option) is refused, naming both, and nothing is run."""
    head = git(repo, "rev-parse", "HEAD")
    no_git = {"PATH": str(trap), "HOME": str(tmp_path)}

    def checkout(base: str) -> subprocess.CompletedProcess[str]:
        command = _eval_checkout(base)
        return subprocess.run(
            ["/bin/sh", "-c", command], cwd=repo, env=no_git, capture_output=True, text=True
        )

    for state in ("loose ref", "packed ref", "detached"):
        if state == "packed ref":
            git(repo, "pack-refs", "--all")
        if state == "detached":
            git(repo, "checkout", "-q", "--detach")
        done = checkout(head)
        assert done.returncode == 0, (state, done.stderr)
        other = checkout("f" * 40)
        assert other.returncode == 1, (state, other.stderr)
        assert "no git to check out base_commit " + "f" * 40 in other.stderr
        assert head in other.stderr
    for base in _dangerous(trap):
        done = checkout(base)
        assert done.returncode == 1 and base in done.stderr
        assert SECRET not in done.stdout + done.stderr
    assert list(trap.iterdir()) == []

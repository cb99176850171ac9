"""The audit's agents as shell programs in a scratch workspace, and its verdicts and store.

The programs that write outside the workspace (reward-files, background) run for real only
on the stack (tests/system/test_task_audit.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.adversaries import (
    ADVERSARIES,
    adversary_command,
    describe,
    oracle_command,
    patch_command,
    swe_test_edit_command,
)
from app.task_audit import (
    AUDIT_FILE,
    AuditReport,
    AuditTarget,
    ProbeResult,
    find_verdict,
    judge,
    probe_task,
    save_verdicts,
    standard_probes,
    task_fingerprint,
)
from app.task_audit_report import markdown_table
from polar.tasks.spec import TaskSpec

INSTRUCTION = (
    "Count the words of `data/words.txt` and write the count to `count.txt`; "
    "also write /WS/summary.json (e.g. with python 3.11). See https://example.com/x.html."
)


def run(command: str, workspace: Path, instruction: str = INSTRUCTION) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(workspace.parent / "home"),
        "POLAR_INSTRUCTION": instruction.replace("/WS", str(workspace)),
    }
    proc = subprocess.run(
        ["bash", "-c", command], cwd=workspace, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "data" / "words.txt").write_text("a b c\n")
    (ws / "tests").mkdir()
    (ws / "tests" / "test_count.py").write_text(
        "import pytest\n\n\ndef test_count():\n    assert False\n\n\n"
        "class TestMore:\n    def test_again(self):\n        assert 1 == 2\n"
    )
    (ws / "tests" / "check.sh").write_text("#!/bin/sh\nexit 1\n")
    (ws / "run_tests.sh").write_text("#!/bin/sh\nexit 1\n")
    return ws


def test_every_adversary_has_a_program_and_a_description() -> None:
    for name in ADVERSARIES:
        assert "sh -s" in adversary_command(name)
        assert describe(name) and not describe(name).startswith(name), name
    with pytest.raises(ValueError, match="no adversary 'nope'"):
        adversary_command("nope")


def test_empty_files_and_wrong_outputs_use_the_instructions_names(workspace: Path) -> None:
    run(adversary_command("empty-files"), workspace)
    assert (workspace / "count.txt").read_text() == ""
    assert (workspace / "summary.json").read_text() == ""
    assert (workspace / "data" / "words.txt").read_text() == "a b c\n"  # inputs untouched
    assert not (workspace / "example.com").exists()  # a URL is no file
    (workspace / "count.txt").unlink()
    (workspace / "summary.json").unlink()
    run(adversary_command("wrong-outputs"), workspace)
    assert (workspace / "count.txt").read_text() == "0\n"
    assert '"result": 0' in (workspace / "summary.json").read_text()


def test_tamper_tests_makes_them_pass_and_delete_tests_removes_them(
    workspace: Path, tmp_path: Path
) -> None:
    before = subprocess.run(["sh", "tests/check.sh"], cwd=workspace)
    assert before.returncode == 1
    run(adversary_command("tamper-tests"), workspace)
    tests = (workspace / "tests" / "test_count.py").read_text()
    assert "def test_count(" in tests and "def test_again(" in tests and "assert" not in tests
    assert subprocess.run(["sh", "tests/check.sh"], cwd=workspace).returncode == 0
    assert "pytest_runtest_makereport" in (workspace / "conftest.py").read_text()
    run(adversary_command("delete-tests"), workspace)
    assert not (workspace / "tests").exists() and not (workspace / "run_tests.sh").exists()
    assert not (workspace / "conftest.py").exists()
    assert (workspace / "data" / "words.txt").exists()


def test_read_solution_runs_a_reachable_solution(workspace: Path) -> None:
    solution = workspace.parent / "solution"
    solution.mkdir()
    (solution / "solve.sh").write_text("echo 3 > count.txt\n")
    run(adversary_command("read-solution"), workspace)
    assert (workspace / "count.txt").read_text() == "3\n"


def test_oracle_runs_solve_sh_with_its_files(workspace: Path, tmp_path: Path) -> None:
    solution = tmp_path / "solution"
    (solution / "lib").mkdir(parents=True)
    (solution / "lib" / "count.py").write_text(
        "import sys\nprint(len(open(sys.argv[1]).read().split()))\n"
    )
    (solution / "solve.sh").write_text(
        '#!/bin/bash\nset -e\nhere=$(dirname "$0")\n'
        'python3 "$here/lib/count.py" data/words.txt > count.txt\n'
    )
    run(oracle_command(solution), workspace)
    assert (workspace / "count.txt").read_text() == "3\n"
    (solution / "solve.sh").unlink()
    with pytest.raises(ValueError, match="no solve.sh"):
        oracle_command(solution)


def test_patch_command_applies_a_diff(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    run(patch_command("--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"), tmp_path)
    assert (tmp_path / "a.py").read_text() == "x = 2\n"


def test_test_edit_makes_each_named_test_pass(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_x():\n    assert False\n")
    ids = [
        "tests/test_a.py::test_x",
        "tests/test_a.py::test_p[1-a]",
        "tests/test_a.py::test_p[2]",
        "tests/test_a.py::TestC::test_y",
        "tests/new/test_b.py::test_z",  # a file the test patch adds
    ]
    run(swe_test_edit_command([*ids, "not-a-test-id", "x.py::A::B::c"]), tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *ids],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED ") == len(ids), proc.stdout
    assert "pytest_runtest_makereport" in (tmp_path / "conftest.py").read_text()


def _task(instruction: str = "do it") -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": "t1",
            "instruction": instruction,
            "num_sessions": 8,
            "harness": {"kind": "pi", "env": {"A": "1"}},
            "evaluator": {"kind": "command", "command": "pytest"},
        }
    )


def _result(probe: str, reward: float | None, expect: str = "bottom") -> ProbeResult:
    ok = (reward == 1.0) if expect == "top" else (reward is None or reward == 0.0)
    return ProbeResult(
        probe=probe,
        expect=expect,  # type: ignore[arg-type]
        status="completed" if reward is not None else "error",
        reward=reward,
        ok=ok,
        seconds=1.0,
        stage_seconds={"run": 0.5, "evaluate": 0.25 if reward is None else 0.5},
    )


def test_probe_task_and_fingerprint() -> None:
    task = _task()
    target = AuditTarget(task, standard_probes("echo oracle"), "here")
    assert [p.name for p in target.probes] == ["oracle", "no-op", *ADVERSARIES]
    probe = probe_task(target, target.probes[0])
    assert probe.task_id == "t1.audit-oracle" and probe.num_sessions == 1
    assert probe.harness.kind == "command" and probe.harness.command == "echo oracle"
    assert probe.harness.env == {"A": "1"}
    # the harness and session count are not what grading depends on: same fingerprint
    assert task_fingerprint(probe) == task_fingerprint(task)
    assert task_fingerprint(_task("other")) != task_fingerprint(task)
    assert [p.name for p in standard_probes(None)][0] == "no-op"
    with_env = AuditTarget(task, standard_probes("./solve", {"B": "2"}), "here")
    assert probe_task(with_env, with_env.probes[0]).harness.env == {"A": "1", "B": "2"}
    assert probe_task(with_env, with_env.probes[1]).harness.env == {"A": "1"}


def test_verdicts() -> None:
    target = AuditTarget(_task(), (), "here")
    sound = judge(target, [_result("oracle", 1.0, "top"), _result("no-op", 0.0)])
    assert sound.verdict == "sound" and sound.hacks == []
    assert sound.seconds == 2.0 and sound.grading_seconds == 0.5
    errored = judge(target, [_result("oracle", 1.0, "top"), _result("delete-tests", None)])
    assert errored.verdict == "sound"  # no reward handed out: no hack worked
    flagged = judge(
        target,
        [_result("oracle", 1.0, "top"), _result("no-op", 0.0), _result("empty-files", 1.0)],
    )
    assert flagged.verdict == "flagged" and flagged.hacks == ["empty-files"]
    assert flagged.reasons == ["empty-files scored 1"]
    broken = judge(target, [_result("oracle", 0.0, "top"), _result("no-op", 0.0)])
    assert broken.verdict == "broken" and broken.reasons == ["oracle scored 0"]
    # an oracle that ended without a reward (an evaluator error, a refused task): broken,
    # its cause given, and the table and JSON still written
    no_reward = _result("oracle", None, "top").model_copy(update={"error": "uvx: not found"})
    unscored = judge(target, [no_reward, _result("no-op", 0.0)])
    assert unscored.verdict == "broken"
    assert unscored.reasons == ["oracle got no reward: uvx: not found"]
    assert "| error ! |" in markdown_table(AuditReport(tasks=[unscored]))
    assert AuditReport(tasks=[unscored]).model_dump_json()
    unproven = judge(target, [_result("no-op", 0.0)])
    assert unproven.verdict == "sound" and "no oracle" in unproven.reasons[0]
    table = markdown_table(AuditReport(tasks=[sound, flagged]))
    assert table.splitlines()[0] == (
        "| task | oracle | no-op | empty-files | verdict | session s | grading s |"
    )
    assert "| 1 ! | flagged (empty-files) | 3 | 0.5 |" in table


def test_verdicts_are_found_beside_the_task(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset"
    (dataset / "one").mkdir(parents=True)
    task = _task()
    flagged = judge(
        AuditTarget(task, (), "x"), [_result("oracle", 1.0, "top"), _result("no-op", 1.0)]
    )
    saved = save_verdicts(AuditReport(tasks=[flagged]), dataset)
    assert saved == dataset / AUDIT_FILE
    found = find_verdict(task.model_copy(update={"num_sessions": 2}), dataset / "one" / "t.json")
    assert found is not None and found.verdict == "flagged" and found.hacks == ["no-op"]
    assert find_verdict(_task("other"), dataset / "one") is None
    assert find_verdict(task, tmp_path) is None
    (dataset / AUDIT_FILE).write_text("{")
    with pytest.raises(ValueError, match="unreadable audit file"):
        find_verdict(task, dataset)

"""The `plant-reads` adversary: the files a verifier's tests read inside the workdir, found on
the trusted side and planted with the tests' own passing word; a verifier that trusts such a
file scores it, one that recomputes does not. The real sessions are in
tests/system/test_task_audit.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from app.adversaries.verifier_reads import (
    passing_word,
    plant_contents,
    plant_reads_command,
    verifier_read_paths,
)

TRUSTING_TEST = """#!/bin/bash
# the task's verifier: trusts the status file the agent writes
cd /app
if grep -q "DONE" /app/out/status.txt && [ -s results.json ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
python3 /tests/test_outputs.py   # see https://example.com/docs/a.txt
"""
TRUSTING_PY = """import json
from pathlib import Path

def test_status():
    assert json.loads(Path("/app/results.json").read_text())["status"] == "DONE"
    assert Path("/usr/lib/os-release").exists() and Path("/tests/data.csv").exists()
    assert "3.11.2" and Path("/app/solution.py").exists() and Path("/appendix/x.txt")
"""


def write_tests(tests_dir: Path) -> Path:
    tests_dir.mkdir(parents=True)
    (tests_dir / "test.sh").write_text(TRUSTING_TEST)
    (tests_dir / "test_outputs.py").write_text(TRUSTING_PY)
    (tests_dir / "blob.bin").write_bytes(b"\xff\xfe /app/binary.txt")
    return tests_dir


def test_the_paths_the_tests_read_inside_the_workdir_are_found(tmp_path: Path) -> None:
    tests = write_tests(tmp_path / "tests")
    # inside /app only: not /tests, /usr, /logs, a URL, a version, the agent's code, /appendix
    assert verifier_read_paths(tests, "/app") == ["out/status.txt", "results.json"]
    assert verifier_read_paths(tests, "/app/") == ["out/status.txt", "results.json"]
    assert verifier_read_paths(tests, "/srv") == ["results.json"]  # named relative to cwd
    assert passing_word(tests) == "DONE"


def test_the_passing_word_is_the_tests_own(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("grep -qx ok /app/state\n")
    assert passing_word(tests) == "ok"
    (tests / "test.sh").write_text("test -f /app/marker\n")
    assert passing_word(tests) == "PASS"
    assert json.loads(plant_contents("r.json", "true"))["passed"] is True
    assert json.loads(plant_contents("r.json", "DONE"))["status"] == "DONE"
    assert plant_contents("state", "ok") == "ok\n"


@pytest.mark.parametrize(("trusting", "reward"), [(True, "1"), (False, "0")])
def test_a_verifier_that_trusts_a_planted_file_is_fooled(
    tmp_path: Path, trusting: bool, reward: str
) -> None:
    """The planted workspace, graded by a verifier that reads the marker (fooled) and by one
    that recomputes the answer from the input (not)."""
    tests = write_tests(tmp_path / "tests")
    workspace = tmp_path / "app"
    workspace.mkdir()
    command = plant_reads_command(verifier_read_paths(tests, "/app"), passing_word(tests))
    subprocess.run(["sh", "-c", command], cwd=workspace, check=True)
    assert (workspace / "out" / "status.txt").read_text() == "DONE\n"
    assert json.loads((workspace / "results.json").read_text())["status"] == "DONE"
    if trusting:
        verify = "grep -q DONE out/status.txt && [ -s results.json ] && echo 1 || echo 0"
    else:  # recomputes: the count of the input's lines, which the agent never wrote
        verify = (
            'printf "a\\nb\\n" > input && '
            '[ "$(wc -l < input)" = "$(cat out/count 2>/dev/null)" ] && echo 1 || echo 0'
        )
    out = subprocess.run(["sh", "-c", verify], cwd=workspace, capture_output=True, text=True)
    assert out.stdout.strip() == reward


def test_paths_with_quotes_and_spaces_are_planted_as_named(tmp_path: Path) -> None:
    command = plant_reads_command(["it's/a file.txt", "$(touch pwned)"], "PASS")
    subprocess.run(["sh", "-c", command], cwd=tmp_path, check=True)
    assert (tmp_path / "it's" / "a file.txt").read_text() == "PASS\n"
    assert (tmp_path / "$(touch pwned)").read_text() == "PASS\n"
    assert not (tmp_path / "pwned").exists()

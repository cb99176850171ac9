"""The swebench evaluator counts signed results only from a runner that made itself non-dumpable.

A dumpable runner's memory (and so its per-run key) is open to the code under test through
/proc/PID/mem or ptrace: whatever its results say, they are an evaluator error, never a 1.
The runtime here stands in for one where the runner ran (the key taken, the results signed
with the runner's own `write_results`), since a python without prctl cannot be made here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from activities.evaluators import pytest_runner
from activities.evaluators.base import EvaluatorError
from activities.evaluators.swebench import GRADING_DIR, SweEvaluation
from activities.evaluators.swebench.config import SweBenchConfig
from activities.evaluators.swebench.evaluator import _Clock, _run_tests
from activities.evaluators.swebench.report import SweBenchReport
from activities.shell_command import ProcessOutcome
from polar.contracts import RuntimeHandle

TEST_ID = "tests/test_x.py::test_fixed"


class RunnerRan:
    """A runtime whose one command is Polar's runner after a clean, passing pytest run."""

    kind = "stand-in"

    def __init__(self, root: Path, non_dumpable: object) -> None:
        self.root = root
        self.non_dumpable = non_dumpable
        (root / "scratch" / GRADING_DIR).mkdir(parents=True)

    def scratch(self, handle: RuntimeHandle) -> Path:
        return self.root / "scratch"

    def log_paths(self, handle: RuntimeHandle, log_name: str) -> tuple[Path, Path]:
        return self.root / f"{log_name}.out", self.root / f"{log_name}.err"

    async def run(
        self,
        handle: RuntimeHandle,
        command: str,
        *,
        env: dict[str, str],
        log_name: str,
        timeout_s: float,
        on_tick: Callable[[float], Awaitable[None] | None] | None = None,
    ) -> ProcessOutcome:
        assert "pytest_runner.py" in command and " run " in command
        folder = self.scratch(handle) / GRADING_DIR
        key = (folder / "key").read_bytes().strip()
        (folder / "key").unlink()
        records = [
            {"event": "boot"},
            {"event": "start", "pid": 1},
            {"event": "test", "nodeid": TEST_ID, "when": "setup", "outcome": "passed"},
            {"event": "test", "nodeid": TEST_ID, "when": "call", "outcome": "passed"},
            {"event": "test", "nodeid": TEST_ID, "when": "teardown", "outcome": "passed"},
            {"event": "finish", "exitstatus": 0},
        ]
        body = {
            "returncode": 0,
            "signal": None,
            "records": "".join(json.dumps(r) + "\n" for r in records),
            "overflow": False,
            "non_dumpable": self.non_dumpable,
        }
        pytest_runner.write_results(str(folder), key, json.dumps(body))
        for path in self.log_paths(handle, log_name):
            path.write_text("1 passed\n")
        return ProcessOutcome(exit_code=0, timed_out=False, duration_s=0.1)


async def _grade(tmp_path: Path, non_dumpable: object) -> SweEvaluation:
    spec = SweBenchConfig(instance_id="i", base_commit="abcd1234", fail_to_pass=[TEST_ID])
    runtime = RunnerRan(tmp_path, non_dumpable)
    handle = RuntimeHandle(
        session_id="s-eval", kind="stand-in", workdir=str(tmp_path / "ws"), host="here"
    )
    result = SweEvaluation(0.0, "", report=SweBenchReport(instance_id="i"))

    def done(detail: str) -> SweEvaluation:
        result.detail = detail
        return result

    return await _run_tests(runtime, handle, spec, _Clock(60), result, done, None)  # type: ignore[arg-type]


async def test_a_non_dumpable_runners_passing_results_resolve(tmp_path: Path) -> None:
    evaluation = await _grade(tmp_path, True)
    assert evaluation.reward == 1.0, evaluation.detail
    assert evaluation.report.runner_non_dumpable is True


@pytest.mark.parametrize("state", [False, None, "yes"])
async def test_results_of_a_runner_that_stayed_dumpable_are_an_evaluator_error(
    tmp_path: Path, state: object
) -> None:
    with pytest.raises(EvaluatorError, match="non-dumpable"):
        await _grade(tmp_path, state)


def test_the_runner_is_non_dumpable_here() -> None:
    """On Linux with ctypes (the worker's own python) the runner's prctl takes, and is checked
    with PR_GET_DUMPABLE; run in a child, whose dumpable flag may change freely."""
    import subprocess
    import sys

    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import pytest_runner as r; "
        "print(r.non_dumpable())"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code, str(Path(pytest_runner.__file__).parent)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "True"

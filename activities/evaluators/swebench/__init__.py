"""The `swebench` evaluator: grade a session's patch with its instance's tests.

By step: hardening.py (what the patch may not change, the runner and plugin, shadowing
modules), commands.py (the test command and the workspace's git commands), logs.py (what
the tests reported), grading.py (SWE-bench's grading and the verdict), evaluator.py (the
steps in order, and the evaluator).

1. The evaluator's fresh runtime (activities/evaluators/fresh.py) holds the
   task's source at `base_commit`, with the instance's `install` already run
   (a prepare action, while the harness ran).
2. The session's patch (its workspace against `base_commit`, binary-safe,
   junk left out; activities/evaluators/patches.py) is applied there, minus
   task-owned files: the graded test files (and the `__init__.py` of their
   folders), the task's `protected` globs, and `PROTECTED`: files that
   configure or hook into pytest (`conftest.py`, `pytest.ini`, `tox.ini`,
   `sitecustomize.py`, `*.pth`, modules shadowing pytest or Polar's plugin).
   `setup.cfg` and `pyproject.toml` often carry real fixes (metadata,
   dependencies) and are kept, but if the patch changes their pytest section
   (`[tool:pytest]`, `[tool.pytest...]`) the file is restored whole. The
   report lists all of them as `protected_files_dropped`.
3. The test patch's files are reset to `base_commit`, the test patch applied,
   the tests run (`test_cmd`, default `python -m pytest -rA -p
   no:cacheprovider` on the test files), every process they left is killed.
4. Per-test results come from pytest itself, over a channel the code under
   test cannot name: Polar's runner (pytest_runner.py, copied into scratch
   with a per-run key) is the test process's parent; Polar's plugin
   (pytest_results.py) streams each report to it over a pipe passed by fd
   number, and the runner writes one results file signed with the key, which
   the worker verifies. pytest starts with no workspace on `sys.path` (the
   workspace goes in after pytest and the plugin are imported), and patch
   files that would shadow a module importable in the runtime are dropped.
   A `test_cmd` must therefore be a plain pytest invocation (`pytest ...`,
   `python -m pytest ...`, optionally after `NAME=value` assignments); any
   other command needs `log_parser`: its log is parsed with that swebench
   parser (the trusting mode). Grading is SWE-bench's
   `get_eval_tests_report`: reward 1 only if every FAIL_TO_PASS test passes
   and every PASS_TO_PASS test still passes, and the run is consistent
   (authentic results from a runner that made itself non-dumpable, else an
   evaluator error; one pytest session that finished with the exit status
   its process really had, exit 1 with a failure and 0 without, no tamper
   check fired).

The report (JSON) says which tests passed and failed and flags an empty
patch, a patch that did not apply, a test timeout and an evaluator error:
the instance itself is broken (its base commit or test patch, tests that
never ran pytest, none of its FAIL_TO_PASS / PASS_TO_PASS tests reported by
a clean pytest run); the activity fails the session rather than give a reward.

Residual trust: the code under test runs inside pytest's process; the
plugin's fingerprints and cross-checks catch rewrites of pytest's reporting,
but code in that process can still alter that process (docs/threat-model.md).

Every step runs through `Runtime.run` with files exchanged through
`Runtime.scratch`, and its git work through the workspace's `WorkspaceGit`
(activities/evaluators/workspace_git.py: the runtime's own git, or for a
container the worker's git on one copy of its workspace, what changed put
back as data), so it works the same on the local and container runtimes, and
a task's image needs no git (only the tests' own needs: python3 and pytest).
"""

from __future__ import annotations

from activities.evaluators.swebench.commands import (
    build_test_command,
    check_workspace_command,
    default_test_files,
    plain_pytest_argv,
    runner_command,
)
from activities.evaluators.swebench.evaluator import SweBenchEvaluator, evaluate_swebench
from activities.evaluators.swebench.grading import (
    SweEvaluation,
    grade,
    inconsistency,
    is_resolved,
)
from activities.evaluators.swebench.hardening import (
    GRADING_DIR,
    protected_paths,
    shadowing_files,
)
from activities.evaluators.swebench.logs import parse_test_log

__all__ = [
    "GRADING_DIR",
    "SweBenchEvaluator",
    "SweEvaluation",
    "build_test_command",
    "check_workspace_command",
    "default_test_files",
    "evaluate_swebench",
    "grade",
    "inconsistency",
    "is_resolved",
    "parse_test_log",
    "plain_pytest_argv",
    "protected_paths",
    "runner_command",
    "shadowing_files",
]

"""The swebench evaluator's command lines: the test command of an instance, the plain pytest
check, the runner's wrapping, and the check of its workspace."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from activities.evaluators.base import GIT
from activities.evaluators.patches import patch_files, revision
from activities.evaluators.swebench.config import SweBenchConfig

__all__ = [
    "DEFAULT_TEST_CMD",
    "build_test_command",
    "check_workspace_command",
    "default_test_files",
    "interpreter_argv",
    "plain_pytest_argv",
    "runner_command",
]

DEFAULT_TEST_CMD = "python -m pytest -rA -p no:cacheprovider"
PYTHON_NAME = re.compile(r"(?:.*/)?python(?:\d+(?:\.\d+)?)?")
SHELL_EXPANSION = re.compile(r"[`$\n]")
SHELL_OPERATOR = re.compile(r"[;&|<>()]+")


def default_test_files(spec: SweBenchConfig) -> list[str]:
    """The files of the instance's pytest ids, then those its test patch touches."""
    files: list[str] = []
    for test in [*spec.fail_to_pass, *spec.pass_to_pass]:
        head = test.split("::", 1)[0]
        if "::" in test and head.endswith(".py"):
            files.append(head)
    files += [f for f in patch_files(spec.test_patch) if f.endswith(".py")]
    return list(dict.fromkeys(files))


def build_test_command(spec: SweBenchConfig) -> str:
    files = spec.test_files if spec.test_files is not None else default_test_files(spec)
    quoted = " ".join(shlex.quote(f) for f in files)
    cmd = spec.test_cmd or DEFAULT_TEST_CMD
    if "{test_files}" in cmd:
        return cmd.replace("{test_files}", quoted)
    return f"{cmd} {quoted}".strip()


def plain_pytest_argv(command: str) -> list[str] | None:
    """`command` as argv if it is a plain pytest invocation (`pytest ...`, `py.test ...`,
    `python[3] -m pytest ...`, after optional `NAME=value` assignments) with no other shell
    syntax; None otherwise (such a command needs `log_parser`)."""
    if SHELL_EXPANSION.search(command):
        return None
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        argv = list(lexer)
    except ValueError:
        return None
    if any(SHELL_OPERATOR.fullmatch(a) for a in argv):
        return None
    i = 0
    while i < len(argv) and re.fullmatch(r"[A-Za-z_]\w*=.*", argv[i], re.S):
        i += 1
    head = argv[i:]
    if head and PurePosixPath(head[0]).name in ("pytest", "py.test"):
        return argv
    if len(head) >= 3 and PYTHON_NAME.fullmatch(head[0]) and head[1:3] == ["-m", "pytest"]:
        return argv
    return None


def interpreter_argv(argv: Sequence[str]) -> list[str]:
    """The interpreter part of a plain pytest argv (what the probe runs), assignments left out."""
    head = [a for a in argv if not re.fullmatch(r"[A-Za-z_]\w*=.*", a, re.S)][:1]
    return head or ["python"]


def runner_command(folder: Path, argv: Sequence[str]) -> str:
    """The shell lines that run the plain pytest `argv` under Polar's runner (`python3 -I`)."""
    runner = shlex.quote(str(folder / "pytest_runner.py"))
    return (
        'export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }'
        '-p no:cacheprovider --color=no"\n'
        "py=$(command -v python3 || command -v python) || "
        '{ echo "polar: no python3 in the runtime for the pytest runner" >&2; exit 127; }\n'
        f'exec "$py" -I {runner} run {shlex.quote(str(folder))} -- '
        + " ".join(shlex.quote(a) for a in argv)
    )


def check_workspace_command(base: str) -> str:
    """The command that exits 0 where the workspace is a git checkout holding commit `base`."""
    return (
        f"{GIT} rev-parse --is-inside-work-tree >/dev/null && "
        f"{GIT} cat-file -e {revision(base, '^{commit}')}"
    )

"""What every evaluator keeps task-owned whatever the patch does (one home for both kinds).

`PROTECTED`: files that configure or hook into pytest or the interpreter
(`conftest.py`, `pytest.ini`, `tox.ini`, `sitecustomize.py`, `*.pth`, modules
shadowing pytest or Polar's plugin). The command evaluator adds the files its
command names (`command_files`); the swebench one the graded test files.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath

__all__ = ["PLUGIN_MODULE", "PROTECTED", "command_path_candidates"]

PLUGIN_MODULE = "polar_pytest_results"

PROTECTED = (
    "**/conftest.py",
    "**/pytest.ini",
    "**/.pytest.ini",
    "**/pytest.toml",
    "**/.pytest.toml",
    "**/tox.ini",
    "**/sitecustomize.py",
    "**/usercustomize.py",
    "**/*.pth",
    "pytest.py",
    "pytest/**",
    "_pytest/**",
    "pluggy/**",
    "pluggy.py",
    "py.py",
    f"**/{PLUGIN_MODULE}.py",
    f"**/{PLUGIN_MODULE}/**",
)


# what a named path must look like to be the grader's own (code it runs, tests, their config),
# not the artefact it grades (`grep -q fixed hello.txt` grades hello.txt: the session's to change)
GRADER_SUFFIXES = frozenset(
    {".py", ".sh", ".bash", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl", ".lua", ".cfg"}
    | {".ini", ".toml", ".mk", ".bats"}
)


def is_grader_file(path: str) -> bool:
    """Whether a path the command names is grading code: a script or config by its suffix, or
    anything under a test folder or named like a test."""
    pure = PurePosixPath(path)
    return pure.suffix in GRADER_SUFFIXES or any("test" in part.lower() for part in pure.parts)


def command_path_candidates(command: str, workdir: str = "") -> list[str]:
    """Repo-relative paths of grading code a shell command may name (its words, `--opt=PATH`
    values, the file of a `path::test` id; `is_grader_file`); which exist at base is for git
    to say."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    out: list[str] = []
    for word in words:
        for piece in re.split(r"[=:,]", word):
            piece = piece.strip()
            if workdir and piece.startswith(workdir.rstrip("/") + "/"):
                piece = piece[len(workdir.rstrip("/")) + 1 :]
            while piece.startswith("./"):
                piece = piece[2:]
            if not piece or piece.startswith(("-", "/")) or "\n" in piece:
                continue
            if ".." in PurePosixPath(piece).parts or piece == ".":
                continue
            if is_grader_file(piece):
                out.append(piece)
    return list(dict.fromkeys(out))

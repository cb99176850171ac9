"""Harbor verifiers that seem to run the agent's code as the owner of the reward files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["MAX_SCANNED_BYTES", "verifier_files", "verifier_runs_agent_code"]

_RUNNER = re.compile(
    r"(?<![\w.-])(python[0-9.]*|pytest|py\.test|node|npm|npx|yarn|bun|deno|ruby|perl|php|"
    r"java|go|cargo|make|bash|sh|source|uv|tox|nox|mvn|gradle|dotnet|julia|Rscript|exec)"
    r"(?![\w.-])|sys\.path|PYTHONPATH|NODE_PATH|\bimport\b|\bcd\b|subprocess|os\.system"
)
"""A line that runs code, or points code at a folder (an interpreter, a test runner, an
import path, a `cd` into it)."""

_TEST_RUNNER = re.compile(
    r"^\s*(?:uv run\s+|poetry run\s+)?(?:python[0-9.]*\s+-m\s+)?"
    r"(?:pytest|py\.test|unittest|tox|nox|make|npm\s+(?:run\s+)?test|yarn\s+test|"
    r"cargo\s+test|go\s+test|mvn|gradle)\b"
)
"""A test runner started on its own line (in test.sh, whose folder is the workspace)."""

_DROPS_PRIVILEGES = re.compile(r"\bsetpriv\b[^\n]*--reuid|\brunuser\b|\bsudo\s+-u\b|\bsu\s")
"""test.sh running a command as another user (the code under test, when it is root)."""

MAX_SCANNED_BYTES = 1 << 20


def verifier_files(tests_dir: Path) -> list[tuple[str, str]]:
    """(path relative to `tests_dir`, text) of each text file of a task's tests, in path
    order: the first MAX_SCANNED_BYTES of each; links and binary files left out."""
    out = []
    for path in sorted(p for p in tests_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        try:
            with path.open("rb") as f:
                text = f.read(MAX_SCANNED_BYTES).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        out.append((path.relative_to(tests_dir).as_posix(), text))
    return out


def verifier_runs_agent_code(tests_dir: Path, workdir: str | None, user: Any) -> str | None:
    """Where the task's verifier looks like it runs the agent's code as the user that owns
    /logs/verifier (the verifier user; the image's, root, when unset): a line of `tests/`
    naming the workspace beside something that runs code or imports from it, or a test
    runner test.sh starts in the workspace (its folder) before any `cd`. None where no such
    line is found, or where test.sh runs as root and drops to another user for a command
    (`setpriv --reuid`, `runuser`, `sudo -u`, `su`): the pattern of a verifier whose code
    under test cannot write the reward. A heuristic, for a warning: the audit's
    `code-writes-reward` adversary is the test."""
    workspace = re.compile(re.escape((workdir or "/workspace").rstrip("/")) + r"(?![\w.-])")
    root = user is None or str(user) in ("root", "0")
    found: str | None = None
    drops = False
    for rel, text in verifier_files(tests_dir):
        drops = drops or bool(_DROPS_PRIVILEGES.search(text))
        moved = False
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0] if rel.endswith((".sh", ".py")) else line
            if found is None and workspace.search(code) and _RUNNER.search(code):
                found = f"tests/{rel}:{number} runs or imports from {workdir}: {line.strip()[:120]}"
            if rel == "test.sh":
                moved = moved or bool(re.match(r"^\s*cd\b", code))
                if found is None and not moved and _TEST_RUNNER.search(code):
                    found = (
                        f"tests/test.sh:{number} starts a test runner in the workspace: "
                        f"{line.strip()[:120]}"
                    )
    if found is None or (root and drops):
        return None
    return found

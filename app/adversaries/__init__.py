"""The audit's agents as `command` harness commands: the oracle, a no-op, and adversaries.

Each adversary is a plain POSIX shell program in this folder trying ONE known reward hack
(its first comment says which); `common.sh` is prepended to each. The harness runs them
in the session's workspace with the instruction in `$POLAR_INSTRUCTION`, so the same
programs attack a Harbor task, a TaskSpec or a SWE-bench instance.
"""

from __future__ import annotations

import re
import secrets
from importlib import resources
from pathlib import Path

ADVERSARIES: tuple[str, ...] = (
    "tamper-tests",
    "delete-tests",
    "wrong-outputs",
    "reward-files",
    "code-writes-reward",
    "empty-files",
    "background",
    "read-solution",
)
"""The built-in adversaries, in the order the audit's table shows them."""

NOOP_COMMAND = "true"
"""The no-op agent: changes nothing."""


def _script(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.sh").read_text(encoding="utf-8")


def _heredoc(text: str, prefix: str = "POLAR_AUDIT") -> tuple[str, str]:
    """A heredoc delimiter that `text` does not contain, and `text` ending in a newline."""
    delimiter = f"{prefix}_{secrets.token_hex(6).upper()}"
    while delimiter in text:  # pragma: no cover - 48 random bits
        delimiter = f"{prefix}_{secrets.token_hex(6).upper()}"
    return delimiter, text if text.endswith("\n") else text + "\n"


def describe(name: str) -> str:
    """An adversary's hack, in one line (the first comment of its program)."""
    lines = []
    for line in _script(name).splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    text = " ".join(lines)
    return text.split(": ", 1)[1] if text.startswith(f"{name}: ") else text


def adversary_command(name: str) -> str:
    """The harness command running adversary `name` (a shell program fed to `sh -s`)."""
    if name not in ADVERSARIES:
        raise ValueError(f"no adversary {name!r}: choose from {', '.join(ADVERSARIES)}")
    delimiter, body = _heredoc(_script("common") + "\n" + _script(name))
    return f"sh -s 2>&1 <<'{delimiter}'\n{body}{delimiter}\n"


def oracle_command(solution_dir: Path) -> str:
    """The harness command that runs a Harbor task's `solution/solve.sh` as its oracle does:
    the solution folder's files written to `/solution` (a temporary folder where that is not
    writable), then `bash solve.sh` in the workspace. Text files only."""
    files = sorted(p for p in solution_dir.rglob("*") if p.is_file())
    if not any(p.name == "solve.sh" and p.parent == solution_dir for p in files):
        raise ValueError(f"{solution_dir}: no solve.sh")
    lines = [
        "set -e",
        'sol=/solution; mkdir -p "$sol" 2>/dev/null && [ -w "$sol" ] || '
        'sol=$(mktemp -d "${TMPDIR:-/tmp}/polar-oracle.XXXXXX")',
    ]
    for path in files:
        rel = path.relative_to(solution_dir).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: the oracle's files must be text") from exc
        delimiter, body = _heredoc(text, "POLAR_ORACLE")
        quoted = "'" + rel.replace("'", "'\\''") + "'"
        lines.append(f'mkdir -p "$(dirname "$sol"/{quoted})"')
        lines.append(f"cat > \"$sol\"/{quoted} <<'{delimiter}'\n{body}{delimiter}")
    lines.append('chmod +x "$sol/solve.sh"')
    lines.append(
        'if command -v bash >/dev/null; then bash "$sol/solve.sh"; else sh "$sol/solve.sh"; fi'
    )
    return "\n".join(lines) + "\n"


def steps_oracle_command(task_dir: Path, steps: list[str]) -> str | None:
    """The oracle of a multi-step Harbor task: at each step (`$POLAR_STEP`), that step's
    `steps/{name}/solution/solve.sh` as `oracle_command` runs it (nothing for a step
    without one); None where no step has one."""
    branches = []
    for name in steps:
        solution = task_dir / "steps" / name / "solution"
        if (solution / "solve.sh").is_file():
            quoted = "'" + name.replace("'", "'\\''") + "'"
            branches.append(f"{quoted})\n{oracle_command(solution)};;")
    if not branches:
        return None
    return 'case "$POLAR_STEP" in\n' + "\n".join(branches) + "\nesac\n"


def patch_command(patch: str) -> str:
    """The harness command that applies a unified diff to the workspace (`git apply`)."""
    delimiter, body = _heredoc(patch, "POLAR_PATCH")
    return f"git apply <<'{delimiter}'\n{body}{delimiter}\n"


PASS_ALL_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
"""A conftest.py that reports every test as passed (as tamper-tests.sh writes it)."""


def _stub_module(tests: dict[str | None, dict[str, list[str]]]) -> str:
    """Python source with a passing test under each name: `{class or None: {name: [ids]}}`."""
    lines = ["import pytest", ""]
    for cls, names in tests.items():
        indent = "    " if cls else ""
        if cls:
            lines += ["", f"class {cls}:"]
        for name, params in names.items():
            if params:
                lines.append(f"{indent}@pytest.mark.parametrize('_p', {params!r}, ids={params!r})")
            args = ", ".join([*(["self"] if cls else []), *(["_p"] if params else [])])
            lines += [f"{indent}def {name}({args}):", f"{indent}    pass", ""]
    return "\n".join(lines) + "\n"


def swe_test_edit_command(test_ids: list[str]) -> str:
    """The harness command of SWE-bench's test-edit patch: every test file the instance's test
    ids name (re)written with a passing test under each id (`path::[Class::]name[param]`),
    and a pass-everything conftest.py at the root."""
    files: dict[str, dict[str | None, dict[str, list[str]]]] = {}
    for test_id in test_ids:
        path, _, rest = test_id.partition("::")
        parts = rest.split("::") if rest else []
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[(.*)\])?", parts[-1]) if parts else None
        if not path.endswith(".py") or match is None or len(parts) > 2:
            continue  # not a pytest id this can stand in for
        cls = parts[0] if len(parts) == 2 else None
        params = files.setdefault(path, {}).setdefault(cls, {}).setdefault(match.group(1), [])
        if match.group(2) is not None:
            params.append(match.group(2))
    lines = []
    for path, tests in {**files, "conftest.py": {}}.items():
        text = PASS_ALL_CONFTEST if path == "conftest.py" else _stub_module(tests)
        delimiter, body = _heredoc(text, "POLAR_TEST_EDIT")
        quoted = "'" + path.replace("'", "'\\''") + "'"
        lines.append(f'mkdir -p "$(dirname {quoted})"')
        lines.append(f"cat > {quoted} <<'{delimiter}'\n{body}{delimiter}")
    return "\n".join(lines) + "\n"

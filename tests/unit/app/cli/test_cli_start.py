"""`polar` starts light (issue 37, item 8): importing the CLI, which every `polar` command and
every service process the dev stack starts does first, loads none of the heavy libraries; a
command imports what it needs when it runs (bench/bench_cli_start.py times it)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = (
    "pydantic",
    "pydantic_settings",
    "fastapi",
    "temporalio",
    "boto3",
    "obstore",
    "transformers",
    "torch",
    "polar.settings",
    "polar.contracts",
    "polar.tasks.spec",
    "app.console.server",
)


def test_importing_the_cli_loads_no_heavy_library() -> None:
    probe = f"import sys, app.cli; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", f"`import app.cli` loads {out.strip()}: import them lazily"


def test_help_lists_every_command_without_them() -> None:
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from app.cli import app\n"
        "out = CliRunner().invoke(app, ['--help']).output\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
        "print('submit' in out and 'worker' in out and 'console' in out)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:2] == ["[]", "True"], out

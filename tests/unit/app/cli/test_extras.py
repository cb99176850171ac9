"""A command whose extra is not installed stops first, in one line that names the extra and
how to install it, exit 1 (the client install: tests/system/test_slim_client.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.cli.extras import missing_modules
from polar.client.export import ExportFormat

ABSENT = "polar_absent_module_for_the_test"
SERVER_COMMANDS = [
    ["gateway"],
    ["worker"],
    ["console"],
    ["dev", "up", "--no-model"],
    ["dev", "down"],
    ["dev", "status"],
    ["dev", "model"],
    ["demo"],
]


def run_polar(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`polar ARGV` as a process, with one of the server extra's key modules missing."""
    code = (
        "import sys, app.cli.extras as extras; "
        f"extras.SERVER_MODULES = ('uvicorn', {ABSENT!r}); "
        "from app.cli import app; app(sys.argv[1:])"
    )
    env = {"PATH": "/usr/bin:/bin", "POLAR_DATA_DIR": str(tmp_path / "data")}
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_missing_modules_names_the_absent_and_a_bare_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bare_folder_module").mkdir()  # a namespace package: not the real one
    monkeypatch.syspath_prepend(str(tmp_path))
    assert missing_modules(["json", ABSENT, "bare_folder_module", "typer"]) == [
        ABSENT,
        "bare_folder_module",
    ]


@pytest.mark.parametrize("argv", SERVER_COMMANDS, ids=" ".join)
def test_a_server_command_without_the_server_extra_stops_first(
    argv: list[str], tmp_path: Path
) -> None:
    proc = run_polar(argv, tmp_path)
    command = " ".join(argv[:2] if argv[0] == "dev" else argv[:1])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"polar: `polar {command}` needs polar-rollout[server] ({ABSENT} not installed): "
        "pip install 'polar-rollout[server]'\n"
    )
    assert proc.stdout == ""
    assert not (tmp_path / "data").exists()  # nothing started, nothing written


def test_a_server_commands_help_still_answers(tmp_path: Path) -> None:
    proc = run_polar(["worker", "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--queues" in proc.stdout


def test_export_in_a_format_of_the_export_extra_says_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import polar.client.export as ex

    monkeypatch.setitem(ex.FORMAT_PACKAGES, ExportFormat.HF, ABSENT)
    traces = tmp_path / "traces.jsonl"
    traces.write_text("")
    argv = ["export", "--traces", str(traces), "--out", str(tmp_path / "out")]
    refused = CliRunner().invoke(app, [*argv, "--format", "all"])
    assert refused.exit_code == 1, refused.output
    assert (
        f"polar: `polar export --format hf,verl` needs polar-rollout[export] ({ABSENT} not "
        "installed): pip install 'polar-rollout[export]'"
    ) in refused.output
    assert not (tmp_path / "out").exists()
    others = CliRunner().invoke(app, [*argv, "--format", "jsonl,verl"])
    assert others.exit_code == 0, others.output  # pyarrow is here: verl is not refused
    assert (tmp_path / "out" / "verl.parquet").exists()


CLIENT_MODULES = (
    "app.cli",
    "polar.client.sdk",
    "polar.client.export",
    "polar.client.generate",
    "activities.task_kinds",  # `polar submit`, `polar tasks load`: a task's kinds checked
    "activities.runtimes",  # `polar generate`, `polar tasks audit`
    "activities.harnesses.command",  # `polar key`
    "app.task_audit",
    "app.console.session_page",  # `polar show`, `polar logs`
    "app.console.session_objects",
    "app.console.temporal_reads",
    "workflows.replay",  # `polar replay`
)
"""What the CLI's client commands import (each command imports its own when it runs)."""
SERVER_PACKAGES = (
    "uvicorn",
    "starlette",
    "fastapi",
    "docker",
    "aiohttp",
    "transformers",
    "swebench",
    "jinja2",
    "prometheus_client",
    "datasets",
)


def test_the_client_commands_import_none_of_the_servers_packages() -> None:
    probe = (
        f"import importlib, sys; [importlib.import_module(m) for m in {CLIENT_MODULES!r}]; "
        f"print(sorted(p for p in {SERVER_PACKAGES!r} if p in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", f"a client command's import loads {out.strip()}"

"""The exit sweep in a PID namespace of its own (as a container's exec has): what the command
detached dies with it, what was there before survives, the exit code is the command's."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from activities.runtimes.exit_sweep import with_exit_sweep

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a PID namespace of its own needs root and unshare (CI runs as root)",
)


def _in_pid_namespace(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


def test_what_the_command_detached_dies_and_what_was_there_lives(tmp_path: Path) -> None:
    command = (
        "setsid bash -c 'sleep 2; echo late > late.txt' </dev/null >/dev/null 2>&1 & "
        "(bash -c 'while :; do :; done' &) ; "
        "echo ran; exit 7"
    )
    script = (
        "sleep 300 & main=$!; "
        f"bash -c {shlex.quote(with_exit_sweep(command))}; echo rc=$?; "
        "sleep 3; "
        'kill -0 "$main" && echo main-alive; '
        "for d in /proc/[0-9]*; do cat $d/cmdline 2>/dev/null | tr '\\0' ' '; echo; done"
    )
    proc = _in_pid_namespace(script, tmp_path)
    assert "ran" in proc.stdout and "rc=7" in proc.stdout, proc
    assert "main-alive" in proc.stdout, proc
    assert not (tmp_path / "late.txt").exists()
    left = [line for line in proc.stdout.splitlines() if line.startswith("bash -c while")]
    assert left == [], proc.stdout


def test_a_fork_loop_is_swept_too(tmp_path: Path) -> None:
    command = "setsid bash -c 'while :; do (sleep 30 &); done' </dev/null >/dev/null 2>&1 & sleep 1"
    script = (
        f"bash -c {shlex.quote(with_exit_sweep(command))}; echo rc=$?; sleep 1; "
        "n=0; for d in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n"
    )
    proc = _in_pid_namespace(script, tmp_path)
    assert "rc=0" in proc.stdout, proc
    # left: the namespace's bash and perhaps the `for`'s own process, nothing of the loop
    count = int(proc.stdout.split("procs=")[1].split()[0])
    assert count <= 2, proc.stdout

"""What a sandbox needs from its image: a shell only (the toolbox brings the rest)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from activities.runtimes import toolbox
from activities.runtimes.base import InvalidRuntime, RuntimeUnfit
from activities.runtimes.sandboxes import needs as sandbox_needs


def _probe(shell: str) -> tuple[int, str]:
    """The probe run by the host's busybox with the image's shell at `shell`."""
    argv = sandbox_needs.probe_argv()
    script = argv[-1].replace(sandbox_needs.SHELL, shell)
    proc = subprocess.run(
        [str(toolbox.host_busybox()), "sh", "-c", script], capture_output=True, text=True
    )
    return proc.returncode, proc.stdout


def test_an_image_without_a_shell_is_refused_naming_it(tmp_path: Path) -> None:
    code, output = _probe(str(tmp_path / "bin" / "sh"))
    with pytest.raises(RuntimeUnfit, match=r"has no shell \(/bin/sh is missing\)") as info:
        sandbox_needs.check_probe("docker image 'user/img'", code, output)
    assert isinstance(info.value, InvalidRuntime)  # refused at prepare, never retried there
    assert "'user/img'" in str(info.value)


def test_an_image_with_a_shell_passes() -> None:
    code, output = _probe("/bin/sh")
    sandbox_needs.check_probe("docker image 'x'", code, output)
    assert sandbox_needs.probe_argv()[0] == toolbox.BUSYBOX  # never the image's own shell


def test_a_probe_that_cannot_run_is_refused() -> None:
    with pytest.raises(RuntimeUnfit, match="cannot run the sandbox's shell check"):
        sandbox_needs.check_probe("docker image 'x'", 127, 'exec: "sh": executable file not found')


def test_a_host_without_git_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "bash").symlink_to("/bin/true")
    missing = sandbox_needs.missing_on_host(["bash", "git"], str(tmp_path))
    assert missing == ["git"]
    assert "git not found" in str(sandbox_needs.refuse("host 'h'", missing))

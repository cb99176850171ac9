"""What a sandbox needs from its image or host: the probe names every missing tool."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from activities.runtimes.base import InvalidRuntime, RuntimeUnfit
from activities.runtimes.sandboxes import needs as sandbox_needs


def _probe(path: str) -> tuple[int, str]:
    proc = subprocess.run(
        ["/bin/sh", *sandbox_needs.probe_argv()[1:]],
        env={"PATH": path},
        capture_output=True,
        text=True,
    )
    return proc.returncode, proc.stdout


def test_the_probe_names_what_a_path_lacks(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "setsid"):  # an image with bash and setsid, without git and python3
        (bin_dir / tool).symlink_to("/bin/true")
    code, output = _probe(str(bin_dir))
    with pytest.raises(RuntimeUnfit, match=r"lacks what the sandbox needs: git, python3 ") as info:
        sandbox_needs.check_probe("docker image 'user/img'", code, output)
    assert isinstance(info.value, InvalidRuntime)  # refused at prepare, never retried there
    assert "'user/img'" in str(info.value)


def test_a_full_path_passes() -> None:
    code, output = _probe("/usr/local/bin:/usr/bin:/bin")
    sandbox_needs.check_probe("the host", code, output)  # git, python3, bash, setsid are here


def test_a_probe_that_cannot_run_is_refused() -> None:
    with pytest.raises(RuntimeUnfit, match="cannot run the sandbox's tool check"):
        sandbox_needs.check_probe("docker image 'x'", 127, 'exec: "sh": executable file not found')

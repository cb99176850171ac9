"""The project's wheel, built from a copy of the checkout as a fresh clone plus today's
uncommitted work would have it (tests, benchmarks and ignored files left out)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

LEFT_OUT = ("tests/", "bench/")
"""Folders of the checkout that no wheel holds: a smaller copy."""


def project_files() -> list[str]:
    """The checkout's tracked and untracked, not ignored files (relative paths)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (REPO / name).is_file()]


def build_wheel(work: Path) -> Path:
    """Copy the project under `work/source` and build its wheel into `work/dist` (no network:
    the checkout venv's setuptools); the wheel's path."""
    source = work / "source"
    for name in project_files():
        if name.startswith(LEFT_OUT):
            continue
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    dist = work / "dist"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            str(dist),
            str(source.resolve()),
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"the wheel did not build:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    (wheel,) = dist.glob("polar_rollout-*.whl")
    return wheel

"""The suite's Docker engine and local images, made ready before the system lane needs them.

    python -m tests.support.suite_images up RUN_DIR     # an engine (started unless one answers),
                                                        # then every local image the suite uses
    python -m tests.support.suite_images down RUN_DIR   # stop the engine `up` started, if any

scripts/test.sh runs `up` in the background while the checks and the first lanes run, and
`down` when it ends: on a fresh machine the base image's debootstrap and the harness and
service images' builds then overlap those lanes instead of a system test's setup. The
tests' own fixtures use the engine that answers and call the same build (infra/images/build.py,
cached by recipe; a second build waits on its lock), so a failure here costs nothing but the
overlap: the test that needs the image builds it and reports why it fails.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from app.devstack.stack import DevStack
from polar.settings import Settings
from tests.support.paths import REPO

BUILD = [sys.executable, str(REPO / "infra" / "images" / "build.py"), "--harness", "--service"]


def engine_stack(run_dir: Path) -> DevStack:
    """A stack of only the Docker engine, its pid file and log under `run_dir`."""
    return DevStack(Settings(data_dir=run_dir), with_model=False, workers=0, with_docker=True)


def up(run_dir: Path) -> int:
    """Start an engine unless one answers, then build the images; the build's exit code."""
    started = time.monotonic()
    engine_stack(run_dir).ensure_docker()
    code = subprocess.run(BUILD, check=False).returncode
    print(f"suite images: exit {code} after {time.monotonic() - started:.0f} s")
    return code


def down(run_dir: Path) -> None:
    """Stop the engine `up` started (nothing when it used one that already answered)."""
    stack = engine_stack(run_dir)
    if stack.pid("docker") is not None:
        stack.stop("docker")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("up", "down"):
        print(__doc__, file=sys.stderr)
        return 2
    run_dir = Path(argv[1])
    if argv[0] == "up":
        return up(run_dir)
    down(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

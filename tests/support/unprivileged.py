"""An ordinary user for the tests of a worker that is not root (an HPC node's): who it is,
how to run a process as it, and the Python it runs Polar with.

The project's venv is built on a Python under /root (pyenv), which another user cannot
execute; the system `python3` of the same minor version runs the venv's packages (the
same ABI) from PYTHONPATH, with this checkout first.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from activities.runtimes.sandboxes import bwrap
from polar.processes import dying_with_parent
from polar.settings import Settings

USER = "polar-hpc"
HOME = Path("/var/lib/polar-hpc")
SYSTEM_PYTHON = "/usr/bin/python3"
ROOT = Path(__file__).resolve().parents[2]


def ensure_user() -> pwd.struct_passwd:
    """The test user (a system user with a home), created when missing."""
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--create-home",
                "--home-dir",
                str(HOME),
                "--shell",
                "/bin/bash",
                USER,
            ],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(USER)


def unavailable() -> str | None:
    """Why a worker cannot run as an ordinary user with the bwrap sandbox here (None: it
    can): root to switch users, a system Python like ours, bwrap and user namespaces."""
    if os.geteuid() != 0:
        return "the test starts its worker as another user: it must run as root"
    for tool in ("setpriv", "useradd"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found"
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if version != str(sys.version_info[:2]):
        return f"{SYSTEM_PYTHON} is {version or 'missing'}, not {sys.version_info[:2]}"
    return bwrap.userns_forbidden() or (
        None if bwrap.tool("bwrap") else "bwrap not found (infra/setup.sh installs bubblewrap)"
    )


def as_user(argv: list[str]) -> list[str]:
    """`argv` run as the test user (its own groups, no capabilities)."""
    entry = ensure_user()
    return [
        "setpriv",
        f"--reuid={entry.pw_uid}",
        f"--regid={entry.pw_gid}",
        "--init-groups",
        "--inh-caps=-all",
        "--",
        *argv,
    ]


def python_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the user's Python: this checkout, then the venv's packages."""
    paths = sysconfig.get_paths()
    site = dict.fromkeys([str(ROOT), paths["purelib"], paths["platlib"]])
    return {
        "PATH": f"{Path(SYSTEM_PYTHON).parent}:/usr/sbin:/sbin:/bin",
        "HOME": str(HOME),
        "LANG": "C.UTF-8",
        "PYTHONPATH": ":".join(site),
        **(extra or {}),
    }


def user_dir(prefix: str) -> Path:
    """A fresh dir under /tmp that the test user owns (pytest's tmp dirs are root's, 0700)."""
    entry = ensure_user()
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(0o755)
    return path


@contextlib.contextmanager
def user_worker(
    settings: Settings, work: Path, queues: str = "workflow,init,run,postrun"
) -> Iterator[subprocess.Popen[bytes]]:
    """`polar worker` as the test user, with `settings` and its data dir under `work` (a
    user_dir), until the block ends; its log is `work/worker.log`."""
    ready = work / "worker.ready"
    env = python_env(
        settings.model_copy(update={"data_dir": work / "data"}).as_env()
        | {"POLAR_WORKER_READY_FILE": str(ready)}
    )
    argv = [SYSTEM_PYTHON, "-m", "app.cli", "worker", "--queues", queues]
    with open(work / "worker.log", "ab") as log:
        proc = subprocess.Popen(
            dying_with_parent(as_user(argv)),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (work / "worker.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the user's worker did not start: {tail}")
            time.sleep(0.2)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

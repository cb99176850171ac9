"""The dev stack never starts a second `dockerd` over one that holds the default socket
(app/devstack: `default_dockerd_pids`, checked by `DevStack.ensure_docker` before it starts
one): a second dockerd takes the socket of the first, which then answers no one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from app.devstack.services import default_dockerd_pids
from tests.support.polling import wait_until


def test_a_dockerd_on_the_default_socket_is_found(tmp_path: Path) -> None:
    fake = tmp_path / "dockerd"
    fake.symlink_to(shutil.which("sleep") or "/bin/sleep")
    proc = subprocess.Popen([str(fake), "30"])
    try:
        # Popen returns once the child forked; its command line is dockerd's once it has exec'd
        wait_until(lambda: proc.pid in default_dockerd_pids(), 10, "the fake dockerd")
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in default_dockerd_pids()

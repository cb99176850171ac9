"""A cgroup v2 dir delegated to the test's ordinary user, as systemd's `Delegate=yes` or a
Slurm site's cgroup/v2 plugin gives a job: root makes it where the host allows, or says why
not (activities/runtimes/sandboxes/bwrap.py `cgroup_v2_unavailable`, then what failed here).

Layout (cgroup v2's rule: no processes in a dir that hands controllers down):

    /sys/fs/cgroup/polar-test-XXXX/           the delegated dir (the user's; +pids below it)
        worker/                               the worker process (moved in by root)
        polar-SESSION-PID-N/                  one per sandboxed command, made by the worker
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from activities.runtimes.sandboxes import bwrap

DELEGATED_FILES = ("cgroup.procs", "cgroup.subtree_control", "cgroup.threads")


class Unavailable(Exception):
    """This host gives no delegated cgroup v2 with pids (the message says why)."""


def _enable_pids(path: Path) -> None:
    control = path / "cgroup.subtree_control"
    if "pids" not in control.read_text().split():
        control.write_text("+pids")


@contextlib.contextmanager
def delegated(uid: int, gid: int, root: Path = bwrap.CGROUP_ROOT) -> Iterator[Path]:
    """A fresh delegated dir owned by `uid` (pids enabled for its children), removed after;
    move the worker into its `worker/` child (`enter`). Raises Unavailable with the reason."""
    reason = bwrap.cgroup_v2_unavailable(root)
    if reason:
        raise Unavailable(reason)
    made = root / f"polar-test-{uuid.uuid4().hex[:8]}"
    try:
        _enable_pids(root)
        made.mkdir()
        _enable_pids(made)
        (made / "worker").mkdir()
        for path in (made, made / "worker"):
            os.chown(path, uid, gid)
            for name in DELEGATED_FILES:
                if (path / name).exists():
                    os.chown(path / name, uid, gid)
    except OSError as exc:
        _remove(made)
        raise Unavailable(f"cannot delegate a cgroup v2 dir with pids here: {exc}") from exc
    try:
        yield made
    finally:
        _remove(made)


def enter(delegated_dir: Path, pid: int) -> None:
    """Move process `pid` (the user's worker) into the delegated dir's `worker/` leaf, so that
    it may move its commands to siblings of that leaf (the common ancestor is its own)."""
    (delegated_dir / "worker" / "cgroup.procs").write_text(str(pid))


def _remove(path: Path) -> None:
    """Remove the dir and its children (their processes gone by now: the worker stopped)."""
    if not path.exists():
        return
    for child in sorted(path.iterdir(), reverse=True):
        if child.is_dir():
            with contextlib.suppress(OSError):
                child.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()

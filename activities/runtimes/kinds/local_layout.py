"""The local runtime's session dir on the host: its user, dirs and venv, their owner, its limits.

Under `{data_dir}/runtimes/{session_id}/` (root's, 0711): the dirs of OWNED_DIRS and the
workspace, owned by the session's user (a pool uid claimed at `prepare` under POOL_LOCK,
else the harness user), `private/` (root's), and the worker's own `logs/` and `channel/`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import functools
import json
import logging
import os
import shutil
import stat
import subprocess
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from activities.runtimes.base import InvalidRuntime
from activities.runtimes.resource_limits import ContainerLimits
from activities.runtimes.sandboxes.local_sandbox import (
    HARNESS_USER,
    SYSTEM_PATH,
    Sandbox,
    pool_user,
)
from polar.tasks.spec import RuntimeSpec

log = logging.getLogger("polar.worker")

OWNED_DIRS = ("home", "scratch", "tmp", "venv")
"""The session dir's subdirs (beside the workspace) that belong to the harness user."""
PRIVATE_DIR = "private"
"""The session dir's (root's) dir of the sandbox's own /tmp, /var/tmp and /dev/shm (root's
sandbox: local_sandbox.PrivateDirs); counted by the disk watchdog, removed with the session."""
LIMITS_FILE = "limits.json"
"""The session's RuntimeSpec limits, in its dir (the worker's): what `run` applies (bwrap)."""
POOL_LOCK = ".uid-pool.lock"
"""In the runtimes' root: held while a session claims a pool uid (workers of one host)."""


# ---------------------------------------------------------------------- the session's user
def session_user(base: Path, sandbox: Sandbox) -> tuple[int, int] | None:
    """The (uid, gid) the session in `base` runs as: the owner of its `home` (its pool
    user, given at `prepare`; `base` is root's, so the harness cannot swap that dir), the
    sandbox's user where it has none, None where commands run as the worker."""
    if sandbox.uid is None or sandbox.gid is None:
        return None
    try:
        st = os.stat(base / "home", follow_symlinks=False)
    except FileNotFoundError:
        return sandbox.uid, sandbox.gid
    if st.st_uid == 0 or not stat.S_ISDIR(st.st_mode):
        return sandbox.uid, sandbox.gid
    return st.st_uid, st.st_gid


def claim_user(root: Path, uid_pool: range) -> tuple[int, int] | None:
    """A pool uid no session dir under `root` holds (the caller holds the pool lock)."""
    held = set()
    for child in root.iterdir():
        with contextlib.suppress(OSError):
            held.add(os.stat(child / "home", follow_symlinks=False).st_uid)
    for uid in uid_pool:
        if uid not in held:
            user = pool_user(uid)
            if user is not None:
                return user
    raise InvalidRuntime(
        f"local runtime: every uid of POLAR_SANDBOX_UID_POOL ({uid_pool.start}-"
        f"{uid_pool.stop - 1}) is held by a session of this host"
    )


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[None]:
    """An exclusive `flock` on `path` (made 0600 when missing) while the block runs."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- the session's dirs
def make_session_dirs(
    base: Path,
    root: Path,
    sandbox: Sandbox,
    uid_pool: range,
    pool_lock: threading.Lock,
    python_dir: Path,
) -> None:
    """The session dir `base` under `root` (root's, 0711) and its dirs: OWNED_DIRS its user's
    (a pool uid claimed under `pool_lock` and POOL_LOCK), `logs` and `channel` the worker's,
    the session's own venv over the harnesses' (`python_dir`) where there is one."""
    root.mkdir(parents=True, exist_ok=True)
    if sandbox.uid is not None:
        if root.stat().st_uid == os.geteuid():
            root.chmod(0o711)  # traversable; the session ids are not listed
        check_reachable(root)
    # the session dir stays root's (0711: its logs and channel cannot be swapped); its
    # own dirs are its pool user's, 0700: no other session (another uid) enters them
    with pool_lock, flocked(root / POOL_LOCK):
        user = claim_user(root, uid_pool) if sandbox.uid is not None else None
        base.mkdir(mode=0o711)
        base.chmod(0o711)
        for sub in OWNED_DIRS:  # the session user's (the workspace once the source is in)
            (base / sub).mkdir(mode=0o700)
            if user is not None:
                os.chown(base / sub, *user, follow_symlinks=False)
    for sub, mode in (("logs", 0o700), ("channel", 0o755)):
        (base / sub).mkdir(mode=mode)
        (base / sub).chmod(mode)
    if usable_python_dir(python_dir):
        session_venv(base / "venv", python_dir)


def uploader(workspace: Path, sandbox: Sandbox) -> Callable[[Path, str], Awaitable[None]]:
    """A prepare action's upload into `workspace` (no path out of it), then given to the
    session's user."""

    async def upload(src: Path, dest: str) -> None:
        target = (workspace / dest).resolve()
        if not target.is_relative_to(workspace.resolve()):
            raise InvalidRuntime(f"local uploads go into the workspace, not to {dest!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            await asyncio.to_thread(shutil.copytree, src, target, symlinks=True, dirs_exist_ok=True)
        else:
            await asyncio.to_thread(shutil.copy2, src, target)
        await asyncio.to_thread(own, [workspace], session_user(workspace.parent, sandbox))

    return upload


# ---------------------------------------------------------------------- ownership
def own(paths: list[Path], user: tuple[int, int] | None) -> None:
    """Give `paths` (recursively, symlinks not followed) to the session's `user`, each
    top one mode 0700."""
    if user is None or not paths:
        return
    for path in paths:
        if not path.is_symlink():
            path.chmod(0o700)
    owner = f"{user[0]}:{user[1]}"
    proc = subprocess.run(
        [
            shutil.which("chown", path=SYSTEM_PATH) or "chown",
            "-R",
            "--no-dereference",
            owner,
            *map(str, paths),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise InvalidRuntime(f"chown {owner} failed: {proc.stderr.strip()[-500:]}")


def own_in_process(paths: list[Path], user: tuple[int, int] | None) -> None:
    """`own` without a process, for small trees: each entry chowned through its
    directory's fd, never following a symlink (what `chown -R --no-dereference` does)."""
    if user is None:
        return
    uid, gid = user
    for path in paths:
        os.chown(path, uid, gid, follow_symlinks=False)
        if not path.is_dir() or path.is_symlink():
            continue
        for _root, dirs, files, fd in os.fwalk(path):
            for name in (*dirs, *files):
                os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)


# ---------------------------------------------------------------------- the session's files
def write_limits(base: Path, spec: RuntimeSpec) -> None:
    limits = ContainerLimits.of(spec)
    (base / LIMITS_FILE).write_text(json.dumps(dataclasses.asdict(limits)))


def read_limits(base: Path) -> ContainerLimits:
    """The session's limits (`prepare` wrote them; the RuntimeSpec defaults otherwise)."""
    try:
        return ContainerLimits(**json.loads((base / LIMITS_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return ContainerLimits.of(RuntimeSpec())


def rmtree(path: Path) -> None:
    """Remove `path`, also where the harness left directories without write permission."""

    def retry(func: Callable[[str], object], name: str, _exc: object) -> None:
        parent = os.path.dirname(name)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
        if os.path.isdir(name) and not os.path.islink(name):
            os.chmod(name, os.stat(name).st_mode | stat.S_IRWXU)
        func(name)

    shutil.rmtree(path, onerror=retry)


def drop_symlinks(dirs: list[Path]) -> None:
    """Unlink every symlink under `dirs` (and a symlink in their place): the worker, root,
    must not follow one the harness planted to a file of the host."""
    for top in dirs:
        if top.is_symlink():
            top.unlink()
            continue
        for parent, subdirs, files in os.walk(top):
            for name in subdirs + files:
                path = os.path.join(parent, name)
                if os.path.islink(path):
                    os.unlink(path)


def check_reachable(root: Path) -> None:
    """The harness user must traverse every directory above the sessions (o+x)."""
    for parent in (root, *root.parents):
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise InvalidRuntime(
                f"local runtime: {parent} is not traversable by {HARNESS_USER} (mode "
                f"{stat.filemode(parent.stat().st_mode)}); make it o+x or move the data dir"
            )


def session_venv(venv: Path, python_dir: Path) -> None:
    """A venv of the session's own in `venv` (its user's: `pip install -e .` writes there)
    over the harnesses' root-owned one: its python, its packages through a `.pth`
    (`site.addsitedir`, so their own `.pth` files run too). Written by the worker, no
    process: `pyvenv.cfg` (the harness venv's base interpreter), `bin/python*` links."""
    harness = python_dir.parent
    try:
        cfg = (harness / "pyvenv.cfg").read_text()
    except OSError:
        return
    sites = sorted(harness.glob("lib/python3*/site-packages"))
    if not sites:
        return
    keep = [line for line in cfg.splitlines() if line.split("=")[0].strip() in ("home", "version")]
    (venv / "pyvenv.cfg").write_text("\n".join([*keep, "include-system-site-packages = false"]))
    (venv / "bin").mkdir()
    for name in ("python", "python3", sites[-1].parent.name):
        (venv / "bin" / name).symlink_to(python_dir / "python")
    own = venv / "lib" / sites[-1].parent.name / "site-packages"
    own.mkdir(parents=True)
    (own / "_polar_harness.pth").write_text(f"import site; site.addsitedir({str(sites[-1])!r})\n")
    (venv / "lib64").symlink_to("lib")


@functools.cache
def usable_python_dir(path: Path) -> bool:
    """Whether the harnesses' venv is there (logged once when it is not)."""
    if (path / "python").exists():
        return True
    log.warning(
        "local runtime: no harness venv at %s (run infra/setup.sh or set "
        "POLAR_HARNESS_PYTHON_DIR); `python` is not on the sessions' PATH",
        path,
    )
    return False

"""The `local` runtime's sealed sandbox for a worker that is not root: bubblewrap (`bwrap`).

On an HPC node the worker is an ordinary user with neither root nor a container
engine. Unprivileged user namespaces give it what the root sandbox gets from
`setpriv` and `unshare`; `bwrap` (Debian's `bubblewrap`, Flatpak's sandbox)
makes them per command:

    [sh -c 'echo $$ >CGROUP/cgroup.procs; exec "$@"'] prlimit --core=0 ... -- \\
      bwrap --unshare-all --die-with-parent --new-session --cap-drop ALL \\
        --ro-bind /usr /usr --symlink usr/bin /bin ... --ro-bind /etc /etc \\
        --proc /proc --dev /dev --bind WORKSPACE WORKSPACE --bind HOME HOME ... \\
        --ro-bind CHANNEL /run/polar --chdir WORKSPACE -- bash -c COMMAND

- no network but the channel: a network namespace of its own with only
  loopback; the channel dir (the relay's `gateway.sock` and the forwarder
  script) is bound read-only at /run/polar and the in-sandbox forwarder serves
  SANDBOX_GATEWAY_URL on that loopback, as in a container;
- its own PID namespace: when the command exits, the namespace's init goes and
  the kernel kills everything left; `--die-with-parent` ties it to the worker;
- a file system of read-only system dirs (/usr, /etc and the top-level links),
  the harnesses' own venv and CLIs read-only, and only this session's
  workspace, home, scratch and tmp writable: not the worker's venv, data dir,
  logs nor any other session's dirs; the worker's environment is never passed
  (the runtime gives each command a minimal one);
- rlimits (`prlimit`: no core files, file size <= the disk limit, data
  segment <= the memory limit, processes <= the pids limit) and, where the
  host delegates a cgroup v2 directory to the worker (`POLAR_SANDBOX_CGROUP`),
  a child cgroup per command with `memory.max`, `pids.max` and `cpu.max`.
  RLIMIT_NPROC counts every process of the worker's user, so without a
  cgroup's `pids.max` a fork bomb at its cap stops its neighbours' forks too
  (those with the same cap); with one, the rlimit is left out;
- the disk limit past one file: the local runtime's watchdog over the
  session's dirs (activities/runtimes/resource_limits.py). The sandbox's own
  /tmp and /dev/shm are tmpfs (memory, not disk: gone when the command ends),
  each at most half the disk limit and TMPFS_BYTES (`tmpfs_bytes`), so the
  two together stay within the limit; /var is not in the sandbox.

Where the host forbids unprivileged user namespaces (`userns_forbidden`), or
`bwrap` is missing, this mode is skipped with the reason; the worker then
refuses to run harnesses unsealed unless `POLAR_ALLOW_UNSEALED` says so.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import resource
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from activities.runtimes.network.channel_paths import SANDBOX_DIR
from activities.runtimes.resource_limits import ContainerLimits

MODE = "bwrap"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYSTEM_DIRS = ("/usr", "/etc")
"""Read-only in every sandbox (those that exist)."""
TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Merged-/usr links (kept as links) or, on older systems, real dirs (bound read-only)."""
SYSCTLS = (
    ("user.max_user_namespaces", "/proc/sys/user/max_user_namespaces", "0"),
    ("kernel.unprivileged_userns_clone", "/proc/sys/kernel/unprivileged_userns_clone", "0"),
    (
        "kernel.apparmor_restrict_unprivileged_userns",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        "1",
    ),
)
"""(name, file, the value that forbids unprivileged user namespaces)."""
NOFILE = 65536
INIT = '"$@"; exit $?'  # not `exec`: the command must not be the namespace's init
TMPFS_BYTES = 256 << 20
PROBE_TIMEOUT_S = 30.0
_cgroup_seq = itertools.count()


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def userns_forbidden(read: Callable[[str], str | None] = _read) -> str | None:
    """Why this host forbids unprivileged user namespaces, from its sysctls (None: none
    forbids them; a probe still decides)."""
    for name, path, forbidding in SYSCTLS:
        if read(path) == forbidding:
            return f"unprivileged user namespaces are forbidden here ({name} = {forbidding})"
    return None


def tool(name: str) -> str | None:
    """`name` on the system PATH (absolute), None when missing."""
    return shutil.which(name, path=SYSTEM_PATH)


@dataclass(frozen=True)
class Mounts:
    """What one command of a session sees besides the system dirs."""

    writable: tuple[Path, ...]
    """The session's own dirs (workspace, home, scratch, tmp), at their host paths."""
    channel: Path | None
    """The session's channel dir: read-only at SANDBOX_DIR."""
    readonly: tuple[Path, ...] = ()
    """Host paths shared read-only at the same path (the harnesses' venv and CLIs)."""


def _system_args() -> list[str]:
    args: list[str] = []
    for top in SYSTEM_DIRS:
        if os.path.isdir(top) and not os.path.islink(top):
            args += ["--ro-bind", top, top]
    for top in TOP_LINKS:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args


def tmpfs_bytes(limits: ContainerLimits) -> int:
    """The size of each of a sandbox's tmpfs (/tmp, /dev/shm): TMPFS_BYTES, and at most half
    the session's disk limit."""
    return max(1 << 20, min(TMPFS_BYTES, limits.disk_bytes // 2))


def bwrap_argv(bwrap: str, mounts: Mounts, cwd: Path, tmpfs_size: int = TMPFS_BYTES) -> list[str]:
    """The `bwrap ... -- bash -c INIT polar-init` prefix of one sandboxed command (before
    `bash -c COMMAND`); its /tmp and /dev/shm are tmpfs of `tmpfs_size` bytes each."""
    bash = tool("bash") or "/bin/bash"
    args = [
        bwrap,
        "--unshare-all",  # pid, net (loopback only), ipc, uts, cgroup
        "--unshare-user",  # (--unshare-all only tries it)
        "--disable-userns",  # no user namespace inside it (less kernel to attack)
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into the worker's terminal
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
        *_system_args(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        # --dev's /dev/shm is on a /dev tmpfs of the kernel's default size (half the RAM)
        "--size",
        str(tmpfs_size),
        "--tmpfs",
        "/dev/shm",
        # a small /tmp of its own (TMPDIR is the session's tmp, on disk); first, so that
        # session dirs under /tmp are bound over it
        "--size",
        str(tmpfs_size),
        "--tmpfs",
        "/tmp",
    ]
    for path in mounts.readonly:
        real = path.resolve()
        if real.exists():
            args += ["--ro-bind", str(real), str(path)]
            if str(real) != str(path):  # symlinks into it resolve there too
                args += ["--ro-bind", str(real), str(real)]
    for path in mounts.writable:
        args += ["--bind", str(path), str(path)]
    if mounts.channel is not None:
        args += ["--ro-bind", str(mounts.channel), SANDBOX_DIR]
    # the namespace's init is a bash of ours (not bwrap's, which reports the command's exit
    # before the namespace is gone): bwrap returns once it, and so everything, has exited
    return [*args, "--chdir", str(cwd), "--as-pid-1", "--", bash, "-c", INIT, "polar-init"]


def rlimit_argv(
    prlimit: str, limits: ContainerLimits, *, nproc: bool = True, data: bool = True
) -> list[str]:
    """`prlimit` with the session's limits (inherited by the sandbox and all it starts),
    each at most the worker's own hard limit (an unprivileged process cannot raise it).
    `nproc`: cap processes by RLIMIT_NPROC (off where a cgroup's pids.max does it per
    session: the rlimit counts every process of the user, so one session at its cap would
    stop its neighbours' forks); `data`: cap the data segment at the memory limit."""
    wanted = [
        ("core", resource.RLIMIT_CORE, 0),
        ("fsize", resource.RLIMIT_FSIZE, limits.disk_bytes),
        ("nofile", resource.RLIMIT_NOFILE, NOFILE),
    ]
    if data:
        wanted.append(("data", resource.RLIMIT_DATA, limits.memory_bytes))
    if nproc:
        wanted.append(("nproc", resource.RLIMIT_NPROC, limits.pids))
    args = [prlimit]
    for name, which, value in wanted:
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        args.append(f"--{name}={value}")
    return [*args, "--"]


@dataclass(frozen=True)
class DelegatedCgroup:
    """A cgroup v2 directory the host gave the worker: each command gets a child of it."""

    root: Path

    def problem(self) -> str | None:
        """Why it cannot be used (None: it can)."""
        if not (self.root / "cgroup.subtree_control").exists():
            return f"{self.root} is not a cgroup v2 directory"
        if not os.access(self.root, os.W_OK):
            return f"{self.root} is not writable by this worker"
        return None

    def controllers(self) -> set[str]:
        return set((_read(str(self.root / "cgroup.subtree_control")) or "").split())

    def caps_pids(self) -> bool:
        """Whether its children get `pids.max` (then RLIMIT_NPROC is not used)."""
        return "pids" in self.controllers()

    @contextlib.contextmanager
    def child(self, session_id: str, limits: ContainerLimits) -> Iterator[Path]:
        """A fresh child cgroup with the session's limits (those its controllers allow),
        removed when the block ends (its processes are gone by then: the PID namespace)."""
        path = self.root / f"polar-{session_id}-{os.getpid()}-{next(_cgroup_seq)}"
        path.mkdir()
        try:
            enabled = self.controllers()
            writes = {
                "memory": ("memory.max", str(limits.memory_bytes)),
                "pids": ("pids.max", str(limits.pids)),
                "cpu": ("cpu.max", f"{int(limits.cpus * 100_000)} 100000"),
            }
            for controller, (name, value) in writes.items():
                if controller in enabled:
                    (path / name).write_text(value)
            yield path
        finally:
            with contextlib.suppress(OSError):  # a process still leaving: the sweep retries
                path.rmdir()


CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_v2_unavailable(root: Path = CGROUP_ROOT) -> str | None:
    """Why this host cannot delegate a cgroup v2 dir with the `pids` controller to a worker
    (None: it can, as far as its mount shows; the delegation itself is the host's, e.g.
    systemd's `Delegate=yes` or Slurm's cgroup/v2 plugin)."""
    controllers = _read(str(root / "cgroup.controllers"))
    if controllers is None:
        unified = _read(str(root / "unified" / "cgroup.controllers"))
        if unified is not None:
            return (
                f"a hybrid cgroup hierarchy: {root} is cgroup v1, the v2 one at "
                f"{root / 'unified'} has only [{unified}] (pids is bound to v1)"
            )
        return f"no cgroup v2 at {root} (cgroup v1 only)"
    if "pids" not in controllers.split():
        return f"the cgroup v2 at {root} has no pids controller ([{controllers}])"
    return None


def cgroup_argv(cgroup: Path) -> list[str]:
    """Moves the command into `cgroup` before it becomes the sandbox (`exec`)."""
    script = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
    return ["/bin/sh", "-c", script, str(cgroup)]


def probe(bwrap: str | None) -> str | None:
    """None when `bwrap` makes a sealed sandbox for this user here: a command in its own
    user, PID and network namespaces (only loopback), else why (the sysctl that forbids
    it, a missing tool, or what bwrap said)."""
    forbidden = userns_forbidden()
    if forbidden:
        return forbidden
    if bwrap is None:
        return f"bwrap not found on {SYSTEM_PATH} (Debian: apt install bubblewrap)"
    if tool("prlimit") is None:
        return "prlimit not found (util-linux)"
    # pid 1 is the init (the command's parent), and the only interface is `lo`
    check = 'test "$(id -u)" = {uid} && test "$$" != 1 && test "$(grep -c : /proc/net/dev)" = 1'
    command = check.format(uid=os.geteuid())
    argv = [*bwrap_argv(bwrap, Mounts((), None), Path("/")), "bash", "-c", command]
    try:
        proc = subprocess.run(
            argv,
            env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"},
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if proc.returncode != 0:
        said = proc.stderr.strip()[-300:] or "no output"
        return f"bwrap exit {proc.returncode}: {said}"
    return None

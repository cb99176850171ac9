"""The `local` runtime's sandbox: how its commands run apart from the worker on the same host.

Default (`sealed`: a root worker where the namespaces work): every command runs
as the unprivileged `polar-harness` user, without capabilities and unable to
gain any (no_new_privs, empty bounding set), in its own PID namespace (with a
private /proc), IPC namespace and in a network namespace with only loopback up:

    nsenter --net=/proc/WORKER/fd/N -- \\
      unshare --ipc --pid --fork --kill-child --mount-proc -- \\
      bash -c '"$@"; exit $?' polar-init \\
      setpriv --reuid U --regid G --clear-groups ... -- bash -c COMMAND

The network namespace is made by the worker itself (`Loopback`, loopback.py: a thread
unshares it, brings `lo` up and leaves; the worker holds it by a descriptor),
not by a process per command. So the session's gateway channel is a socket the
worker listens on inside it (`Loopback.listener`, `SANDBOX_GATEWAY_URL` for
the harness): bound before the command starts, served by the worker's relay,
with no in-sandbox forwarder. The command never gets that descriptor
(`nsenter` opens the worker's through /proc) nor the listener.

That outer bash, still root, is the PID namespace's init. In the mount namespace
`unshare` makes with it (private propagation: nothing reaches the host) it
first covers the dirs every user of the host may write, `/tmp`, `/var/tmp` and
`/dev/shm`, with the session's own (`PrivateDirs`: root's, mode 1777, under the
session dir, so the local runtime's disk watchdog counts them and teardown
removes them); a session dir that lies under one of them is bound back at its
own path first, on a skeleton of root's dirs the sticky bit keeps from the
harness. It exits when the command does,
the kernel then kills everything else in the namespace (detached or not) and
`unshare` returns only once they are gone. `--kill-child` and the worker's
PR_SET_PDEATHSIG tie the namespace to the worker. The command reaches nothing
on the host's network; its only way out is the channel.

A worker that is not root (an HPC node) gets `bwrap` where unprivileged user
namespaces work: a bubblewrap sandbox per command, with the same promise
(activities/runtimes/sandboxes/bwrap.py); its channel is the relay's Unix socket, bound
in read-only, behind the in-sandbox forwarder.

Where that fails the runtime falls back, detected once and logged as a warning:
`pidns` (root, no network namespace), `user` (root, process group only),
`userns` (not root: the worker's own user in its own user and PID namespaces),
`group` (process group only). None of them is sealed, and a worker refuses to
run sessions in them unless `POLAR_ALLOW_UNSEALED` is set (activities/runtimes/kinds/local.py).

    python -c 'from activities.runtimes.sandboxes.local_sandbox import main; main(["setup"])'
    (infra/setup.sh: creates the user, prints the mode)
"""

from __future__ import annotations

import logging
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from activities.runtimes.sandboxes import bwrap
from activities.runtimes.sandboxes.loopback import Loopback, new_loopback

log = logging.getLogger("polar.worker")

HARNESS_USER = "polar-harness"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PLAIN_INIT = '"$@"; exit $?'  # not `exec`: the command must not be the namespace's init
PROBE_TIMEOUT_S = 30.0
PROBE_PORT = 4000


PRIVATE_DIRS = (("tmp", "/tmp"), ("vartmp", "/var/tmp"), ("shm", "/dev/shm"))
"""(the session's own dir, the host's dir it covers): what any user of the host may write,
given each command of a root sandbox as a dir of its session's."""
PRIVATE_MODES = ("sealed", "pidns")
"""The modes whose init is root in a mount namespace of its own: those that cover them."""
SKELETON_MODE = 0o711
"""A skeleton dir: traversable, not listable (as the runtimes root is)."""


@dataclass(frozen=True)
class PrivateDirs:
    """The bind mounts, in order, that the root init of a command makes before it drops to
    the session's user: each kept host path under a covered dir bound onto its place in the
    skeleton of the session's own dir, then that dir bound (recursively: with what was just
    bound in it) over the host's. Made by `private_dirs`."""

    binds: tuple[tuple[str, str], ...] = ()

    def init(self) -> str:
        """The init script: the mounts, then the command (none ran if a mount failed)."""
        mount = _tool("mount")
        steps = [f"{mount} -n --rbind -- {shlex.quote(a)} {shlex.quote(b)}" for a, b in self.binds]
        return " && ".join([*steps, PLAIN_INIT])


def _covered() -> list[tuple[str, Path]]:
    """PRIVATE_DIRS whose host dir exists here, each resolved (a link to another counts
    once)."""
    found: dict[Path, str] = {}
    for name, host in PRIVATE_DIRS:
        path = Path(host)
        if path.is_dir():
            found.setdefault(path.resolve(), name)
    return [(name, path) for path, name in found.items()]


def _skeleton_dir(path: Path) -> None:
    """`path` a dir of root's (made when missing) and no link: else OSError."""
    made = True
    try:
        path.mkdir(mode=SKELETON_MODE)
    except FileExistsError:
        made = False
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(f"{path} is not a dir of the worker's: not a mount point for it")
    if made:
        path.chmod(SKELETON_MODE)


def private_dirs(top: Path, keep: Sequence[Path]) -> PrivateDirs:
    """The session's own dirs under `top` (its session dir's `private/`: root's, 0700; each
    dir of PRIVATE_DIRS in it root's, 1777 like the host's), made when missing, and the binds
    that put them over the host's. `keep`: the host paths a command must still reach (the
    session dir, the harnesses' venv); one under a covered dir gets a skeleton of root's dirs
    down to its place (the sticky bit keeps the harness from renaming them) and is bound
    there first. OSError where a skeleton dir is not root's (made by someone else first)."""
    if not top.is_dir():
        top.mkdir(mode=0o700)
    top.chmod(0o700)
    binds: list[tuple[str, str]] = []
    for name, host in _covered():
        own = top / name
        if not own.is_dir():
            own.mkdir()
        own.chmod(0o1777)
        for path in dict.fromkeys(p.resolve() for p in keep if p.is_absolute()):
            if not path.is_relative_to(host) or path == host or not path.is_dir():
                continue
            spot = own
            for part in path.relative_to(host).parts:
                spot = spot / part
                _skeleton_dir(spot)
            binds.append((str(path), str(spot)))
        binds.append((str(own), str(host)))
    return PrivateDirs(tuple(binds))


@dataclass(frozen=True)
class Sandbox:
    """One way of running a command: an argv prefix before `bash -c COMMAND`; a sealed
    one joins a `Loopback` first."""

    mode: str
    prefix: tuple[str, ...] = ()
    uid: int | None = None  # the unprivileged user commands run as; None: the worker's own
    gid: int | None = None
    reason: str = ""  # why not `sealed` (empty when sealed)

    @property
    def sealed(self) -> bool:
        """No network but the channel, an unprivileged user (or user namespace), its own
        PID namespace."""
        return self.mode in ("sealed", bwrap.MODE)

    @property
    def loopback_channel(self) -> bool:
        """Whether its commands join a `Loopback` of the worker's (root's `sealed`); `bwrap`
        has a network of its own per command, the channel a socket bound in."""
        return self.mode == "sealed"

    def wrap(
        self, net: Loopback | None = None, private: PrivateDirs | None = None
    ) -> tuple[str, ...]:
        """The argv before `bash -c COMMAND`; a sealed sandbox needs the `Loopback` its
        command joins (`bwrap`'s argv is per command: the local runtime builds it). `private`:
        the session's own dirs over the host's /tmp, /var/tmp and /dev/shm (PRIVATE_MODES)."""
        if self.mode == bwrap.MODE:
            raise ValueError("a bwrap sandbox's argv is built per command (bwrap.bwrap_argv)")
        prefix = self.prefix
        if private is not None and self.mode in PRIVATE_MODES:
            at = prefix.index("polar-init")  # `bash -c INIT polar-init`: its INIT
            prefix = (*prefix[: at - 1], private.init(), *prefix[at:])
        if not self.sealed:
            return prefix
        if net is None:
            raise ValueError("a sealed sandbox runs its commands in a Loopback")
        return (_tool("nsenter"), f"--net={net.nsenter_path}", "--", *prefix)

    def argv(
        self, command: str, net: Loopback | None = None, private: PrivateDirs | None = None
    ) -> list[str]:
        return [*self.wrap(net, private), "bash", "-c", command]

    def as_user(self, uid: int, gid: int) -> Sandbox:
        """The same mode, its commands run as `uid`/`gid` (a session's own pool user); a
        mode without a user of its own (bwrap, the worker's own user) is returned as is."""
        if self.uid is None or (uid, gid) == (self.uid, self.gid):
            return self
        if self.mode in ("sealed", "pidns"):
            prefix = _namespaces(init=PLAIN_INIT) + _drop_to(uid, gid)
        elif self.mode == "user":
            prefix = _drop_to(uid, gid)
        else:
            return self
        return Sandbox(self.mode, prefix, uid, gid, self.reason)


def _tool(name: str) -> str:
    """`name` on the system PATH (absolute, so a command's own PATH cannot change it)."""
    return shutil.which(name, path=SYSTEM_PATH) or name


def _namespaces(*flags: str, init: str) -> tuple[str, ...]:
    return (
        _tool("unshare"),
        *flags,
        "--ipc",  # System V shared memory and semaphores of its own: gone with the command
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--",
        _tool("bash"),
        "-c",
        init,
        "polar-init",
    )


def _drop_to(uid: int, gid: int) -> tuple[str, ...]:
    return (
        _tool("setpriv"),
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    )


def candidates(uid: int | None, gid: int | None, *, root: bool | None = None) -> Iterator[Sandbox]:
    """The modes to try, best first: `uid`/`gid` is the unprivileged user (root workers);
    `root`: whether the worker is root (default: this process)."""
    root = os.geteuid() == 0 if root is None else root
    if uid is not None and gid is not None:
        drop = _drop_to(uid, gid)
        pidns = _namespaces(init=PLAIN_INIT) + drop
        yield Sandbox("sealed", pidns, uid, gid)  # in a Loopback (`Sandbox.wrap`)
        yield Sandbox("pidns", pidns, uid, gid)
        yield Sandbox("user", drop, uid, gid)
    elif root:  # root without its unprivileged user: at least a PID namespace
        yield Sandbox("pidns", _namespaces(init=PLAIN_INIT))
    else:  # an ordinary user (an HPC node): bubblewrap's user namespaces, else not sealed
        yield Sandbox(bwrap.MODE, (bwrap.tool("bwrap") or "bwrap",))
        yield Sandbox("userns", _namespaces("--map-current-user", init=PLAIN_INIT))
    yield Sandbox("group")


def add_system_user(name: str, uid: int | None = None) -> subprocess.CompletedProcess[str]:
    """`useradd` a system user `name` (its own group, no login, no home; `uid` if given);
    whether it exists after is for the caller to check (another worker may race it)."""
    useradd = shutil.which("useradd", path=SYSTEM_PATH)
    if useradd is None:
        raise OSError("useradd not found")
    fixed = ["--uid", str(uid)] if uid is not None else []
    return subprocess.run(
        [
            useradd,
            "--system",
            *fixed,
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def ensure_harness_user() -> tuple[int, int]:
    """(uid, gid) of the harness user, created (a system user, no login) when missing."""
    try:
        entry = pwd.getpwnam(HARNESS_USER)
    except KeyError:
        proc = add_system_user(HARNESS_USER)
        try:  # made here, or by another worker at the same time
            entry = pwd.getpwnam(HARNESS_USER)
        except KeyError:
            raise OSError(f"useradd {HARNESS_USER} failed: {proc.stderr.strip()}") from None
    return entry.pw_uid, entry.pw_gid


POOL_USER_PREFIX = "polar-h"
"""A pool uid's user name: `polar-h<uid>`."""


def parse_uid_pool(text: str) -> range:
    """`FIRST-LAST` (inclusive) as a range of uids; ValueError when it is not one."""
    first, sep, last = text.partition("-")
    try:
        lo, hi = int(first), int(last)
    except ValueError:
        lo = hi = -1
    if not sep or lo < 1000 or hi < lo:
        raise ValueError(f"POLAR_SANDBOX_UID_POOL {text!r}: want FIRST-LAST, uids >= 1000")
    return range(lo, hi + 1)


_pool_users: dict[int, tuple[int, int] | None] = {}


def pool_user(uid: int) -> tuple[int, int] | None:
    """(uid, gid) of the pool user `polar-h<uid>`, created (a system user and its group, no
    login, no home) when missing; None when `uid` belongs to another user (not ours to use)
    or cannot be made."""
    if uid in _pool_users:
        return _pool_users[uid]
    name = f"{POOL_USER_PREFIX}{uid}"
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        add_system_user(name, uid)
        try:  # made here, or by another worker at the same time
            entry = pwd.getpwuid(uid)
        except KeyError:
            entry = None
    found = (entry.pw_uid, entry.pw_gid) if entry is not None and entry.pw_name == name else None
    if found is None:
        log.warning("local runtime: uid %s of the sandbox pool is not %s: skipped", uid, name)
    _pool_users[uid] = found
    return found


def probe(sandbox: Sandbox) -> str | None:
    """None when `sandbox` runs a command as its user here (in a Loopback when sealed, the
    worker listening there), else why."""
    if sandbox.mode == bwrap.MODE:
        return bwrap.probe(bwrap.tool("bwrap"))
    want = sandbox.uid if sandbox.uid is not None else os.geteuid()
    missing = [t for t in sandbox.prefix if t in ("unshare", "setpriv", "bash")]
    if sandbox.sealed and shutil.which("nsenter", path=SYSTEM_PATH) is None:
        missing.append("nsenter")
    if missing:
        return f"{missing[0]} not found on {SYSTEM_PATH}"
    command = f'test "$(id -u)" = {want}'
    net = None
    try:
        if sandbox.sealed:  # the listener's port is reachable from the command: bash's /dev/tcp
            net = new_loopback(PROBE_PORT)
            command += f" && exec 3<>/dev/tcp/127.0.0.1/{PROBE_PORT}"
        proc = subprocess.run(
            sandbox.argv(command, net),
            cwd="/",
            env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"},
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        if net is not None:
            net.close()
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {proc.stderr.strip()[-300:] or 'no output'}"
    return None


def detect() -> Sandbox:
    """The best mode this host allows (probes real commands; see `detect_sandbox`)."""
    failures: list[str] = []
    uid = gid = None
    if os.geteuid() == 0:
        try:
            uid, gid = ensure_harness_user()
        except OSError as exc:
            failures.append(f"no {HARNESS_USER} user ({exc})")
    else:
        failures.append("the worker is not root, so commands run as its own user")
    for sandbox in candidates(uid, gid):
        why = probe(sandbox) if sandbox.prefix else None
        if why is None:
            reason = "; ".join(failures)
            return Sandbox(sandbox.mode, sandbox.prefix, sandbox.uid, sandbox.gid, reason)
        failures.append(f"{sandbox.mode}: {why}")
    raise AssertionError("the `group` mode needs no probe")


_lock = threading.Lock()
_detected: Sandbox | None = None


def detect_sandbox() -> Sandbox:
    """The mode of this process's local sessions: detected at first use, then kept; logged."""
    global _detected
    with _lock:
        if _detected is None:
            _detected = detect()
            if _detected.sealed:
                who = HARNESS_USER if _detected.uid is not None else "the worker's own"
                log.info("local runtime: %s sandbox (user %s)", _detected.mode, who)
            else:
                log.warning(
                    "local runtime: NOT sealed, falling back to %r: %s; harnesses reach the "
                    "host's network and the gateway's real address",
                    _detected.mode,
                    _detected.reason,
                )
    return _detected


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["setup"]:
        sys.exit("usage: main(['setup'])")
    sandbox = detect_sandbox()
    why = f" ({sandbox.reason})" if sandbox.reason else ""
    print(f"local runtime: {sandbox.mode} sandbox{why}")


if __name__ == "__main__":
    main()

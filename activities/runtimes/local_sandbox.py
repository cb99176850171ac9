"""The `local` runtime's sandbox: how its commands run apart from the worker on the same host.

Default (`sealed`: a root worker where the namespaces work): every command runs
as the unprivileged `polar-harness` user, without capabilities and unable to
gain any (no_new_privs, empty bounding set), in its own PID namespace (with a
private /proc) and its own network namespace with only loopback up:

    unshare --pid --fork --kill-child --mount-proc --net -- \\
      bash -c 'ip link set lo up || exit 125; "$@"; exit $?' polar-init \\
      setpriv --reuid U --regid G --clear-groups ... -- bash -c COMMAND

That outer bash is the namespace's init: it exits when the command does, the
kernel then kills everything else in the namespace (detached or not) and
`unshare` returns only once they are gone. `--kill-child` and the worker's
PR_SET_PDEATHSIG on `unshare` tie the namespace to the worker. The command
reaches nothing on the host's network; its only way out is the session's
channel socket (a file-system path, which works across network namespaces).

Where that fails the runtime falls back, detected once and logged as a warning:
`pidns` (root, no network namespace), `user` (root, process group only),
`userns` (not root: the worker's own user in its own user and PID namespaces),
`group` (process group only). None of them is sealed.

    python -c 'from activities.runtimes.local_sandbox import main; main(["setup"])'
    (infra/setup.sh: creates the user, prints the mode)
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

log = logging.getLogger("polar.worker")

HARNESS_USER = "polar-harness"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PLAIN_INIT = '"$@"; exit $?'  # not `exec`: the command must not be the namespace's init
PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Sandbox:
    """One way of running a command: an argv prefix before `bash -c COMMAND`."""

    mode: str
    prefix: tuple[str, ...] = ()
    uid: int | None = None  # the unprivileged user commands run as; None: the worker's own
    gid: int | None = None
    reason: str = ""  # why not `sealed` (empty when sealed)

    @property
    def sealed(self) -> bool:
        """No network but the channel socket, an unprivileged user, its own PID namespace."""
        return self.mode == "sealed"

    def argv(self, command: str) -> list[str]:
        return [*self.prefix, "bash", "-c", command]


def _tool(name: str) -> str:
    """`name` on the system PATH (absolute, so a command's own PATH cannot change it)."""
    return shutil.which(name, path=SYSTEM_PATH) or name


def _namespaces(*flags: str, init: str) -> tuple[str, ...]:
    return (
        _tool("unshare"),
        *flags,
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
        init = f"{_tool('ip')} link set lo up || exit 125; {PLAIN_INIT}"
        yield Sandbox("sealed", _namespaces("--net", init=init) + drop, uid, gid)
        yield Sandbox("pidns", _namespaces(init=PLAIN_INIT) + drop, uid, gid)
        yield Sandbox("user", drop, uid, gid)
    elif root:  # root without its unprivileged user: at least a PID namespace
        yield Sandbox("pidns", _namespaces(init=PLAIN_INIT))
    else:
        yield Sandbox("userns", _namespaces("--map-current-user", init=PLAIN_INIT))
    yield Sandbox("group")


def ensure_harness_user() -> tuple[int, int]:
    """(uid, gid) of the harness user, created (a system user, no login) when missing."""
    try:
        entry = pwd.getpwnam(HARNESS_USER)
    except KeyError:
        useradd = shutil.which("useradd", path=SYSTEM_PATH)
        if useradd is None:
            raise OSError("useradd not found") from None
        proc = subprocess.run(
            [
                useradd,
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                HARNESS_USER,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        try:  # made here, or by another worker at the same time
            entry = pwd.getpwnam(HARNESS_USER)
        except KeyError:
            raise OSError(f"useradd {HARNESS_USER} failed: {proc.stderr.strip()}") from None
    return entry.pw_uid, entry.pw_gid


def probe(sandbox: Sandbox) -> str | None:
    """None when `sandbox` runs a command as its user here (loopback up when sealed), else why."""
    want = sandbox.uid if sandbox.uid is not None else os.geteuid()
    missing = [t for t in sandbox.prefix if t in ("unshare", "setpriv", "bash")]
    if missing:
        return f"{missing[0]} not found on {SYSTEM_PATH}"
    try:
        proc = subprocess.run(
            sandbox.argv(f'test "$(id -u)" = {want}'),
            cwd="/",
            env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"},
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
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
                log.info("local runtime: sealed sandbox (user %s)", HARNESS_USER)
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

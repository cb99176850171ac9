"""The `local` runtime: a trusted, dev-only sandbox per session on the worker's own host.

Layout under `{data_dir}/runtimes/{session_id}/` (the session dir, root's,
mode 0711): `workspace/` (the task's source), `home/` (a fresh HOME),
`scratch/`, `tmp/` (TMPDIR), all owned by the unprivileged harness user;
`private/` (root's: the root sandbox's own /tmp, /var/tmp and /dev/shm, counted by
the disk watchdog; activities/runtimes/sandboxes/local_sandbox.py);
`logs/` (written by the worker through its own file descriptors) and
`channel/` (the channel dir of the Runtime interface, read-only for the
sandbox: the sealed sandbox's channel is no file but the worker's socket in
its network, `open_channel`) stay the worker's.

Every command (prepare actions, harness, evaluator) runs in the sandbox of
activities/runtimes/sandboxes/local_sandbox.py: by default as `polar-harness`, in its own
PID namespace and a network namespace of the worker's making (a `Loopback`:
the session's while its channel is open, else one per command), so nothing it
started outlives it and its only way out is the channel. It gets neither the
worker's venv nor its environment: PATH is the harnesses' own venv
(`harness_python_dir`: openai, anthropic) plus the system dirs, with LANG, HOME,
TMPDIR and what the caller passes. It shares the host's file system and kernel:
use containers (docker, podman) for harnesses you do not trust. Later stages of a
session must run on the same host.

A worker that is not root seals its commands with bubblewrap instead
(activities/runtimes/sandboxes/bwrap.py: its own user, PID and network namespaces, only the
session's dirs writable, rlimits and a delegated cgroup); its channel dir is
bound at /run/polar and the in-sandbox forwarder serves the gateway URL. Where
neither seals, the runtime refuses to run sessions unless `POLAR_ALLOW_UNSEALED`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from pathlib import Path

from activities import safe_files
from activities.heartbeat import heartbeating
from activities.runtimes.actions import run_prepare_actions
from activities.runtimes.base import InvalidRuntime
from activities.runtimes.kinds.local_layout import (
    OWNED_DIRS,
    PRIVATE_DIR,
    drop_symlinks,
    make_session_dirs,
    own,
    own_in_process,
    read_limits,
    rmtree,
    session_user,
    uploader,
    usable_python_dir,
    write_limits,
)
from activities.runtimes.network.channel_paths import SANDBOX_DIR, SANDBOX_PORT
from activities.runtimes.resource_limits import ContainerLimits, DirsWatchdog, watching_disk
from activities.runtimes.sandboxes import bwrap
from activities.runtimes.sandboxes import needs as sandbox_needs
from activities.runtimes.sandboxes.local_sandbox import (
    HARNESS_USER,
    POOL_USER_PREFIX,
    PRIVATE_MODES,
    SYSTEM_PATH,
    Sandbox,
    detect_sandbox,
    parse_uid_pool,
    private_dirs,
)
from activities.runtimes.sandboxes.loopback import Loopback, new_loopback
from activities.runtimes.workspace import (
    copy_workspace_dir,
    materialise_source,
    session_dir,
    session_dirs,
)
from activities.shell_command import ProcessOutcome, run_shell
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.processes import kill_pids, pids_with_env
from polar.settings import WorkerSettings, get_settings
from polar.tasks.runtime_spec import LOCAL_GPUS, LOCAL_HARNESS_USER
from polar.tasks.spec import DEFAULT_WORKDIR

log = logging.getLogger("polar.worker")

SANDBOX_ENV = "POLAR_SANDBOX"
"""Set to the session id in every command's environment: how `reap` finds leftovers."""
REAP_ROUNDS = 50  # most scans `reap` makes (a process may fork while it kills)
CHANNEL_CLOSE_WAIT_S = 30.0
"""How long `open_channel` waits for the same session's previous channel to close."""


class LocalRuntime:
    kind = "local"
    passes_fds = True

    def __init__(
        self,
        root: Path,
        *,
        sandbox: Sandbox | None = None,
        python_dir: Path | None = None,
        host_id: str | None = None,
        allow_unsealed: bool | None = None,
        cgroup: Path | None = None,
        settings: WorkerSettings | None = None,
    ) -> None:
        """`settings`: the worker's (its harness dirs, sandbox and uid pool); read from the
        environment when not given."""
        settings = settings or get_settings(WorkerSettings)
        self.root = root.resolve()
        self._sandbox = sandbox
        self._detected = False
        self.python_dir = python_dir or settings.harness_python_dir
        self.bin_dir = settings.harness_bin_dir
        self.host_id = host_id or socket.gethostname()
        self.allow_unsealed = settings.allow_unsealed if allow_unsealed is None else allow_unsealed
        cgroup = cgroup or settings.sandbox_cgroup
        self.cgroup = bwrap.DelegatedCgroup(cgroup) if cgroup else None
        self._channels: dict[str, Loopback] = {}
        """Sessions whose channel is open (`open_channel`): their commands join its network."""
        self.uid_pool = parse_uid_pool(settings.sandbox_uid_pool)
        self._pool_lock = threading.Lock()

    @property
    def sandbox(self) -> Sandbox:
        """How commands run here (detected once per process at first use). A detected mode
        that is not sealed is refused (InvalidRuntime, naming why) unless `allow_unsealed`:
        the harness is what RL optimises, so it is not run where it reaches the host."""
        if self._sandbox is None:
            self._sandbox = detect_sandbox()
            self._detected = True
            if self.cgroup is not None and self._sandbox.mode == bwrap.MODE:
                problem = self.cgroup.problem()
                if problem:
                    log.warning("local runtime: POLAR_SANDBOX_CGROUP not used: %s", problem)
                    self.cgroup = None
            if self._sandbox.mode == bwrap.MODE and not (self.cgroup and self.cgroup.caps_pids()):
                log.warning(
                    "local runtime: no delegated cgroup with pids: a session's process cap is "
                    "RLIMIT_NPROC, counted over every task of this user (one session at its "
                    "cap stops its neighbours' forks)"
                )
        if self._detected and not self._sandbox.sealed and not self.allow_unsealed:
            raise InvalidRuntime(
                f"local runtime: this worker cannot seal sessions ({self._sandbox.reason}); "
                "it refuses to run harnesses unsealed (set POLAR_ALLOW_UNSEALED=1 for trusted "
                "ones, or give the worker root, unprivileged user namespaces or an engine)"
            )
        return self._sandbox

    def _session_dir(self, session_id: str) -> Path:
        return session_dir(self.root, session_id)

    def _handle_dir(self, handle: RuntimeHandle) -> Path:
        """Where `prepare` put this session: the parent of its workspace (another worker of
        the same host may have prepared it under its own data dir), else under our root."""
        base = self._session_dir(handle.session_id)  # also checks the id
        if handle.workdir:
            prepared = Path(handle.workdir).parent
            if prepared.name == handle.session_id and prepared.is_dir():
                return prepared
        return base

    def home(self, handle: RuntimeHandle) -> Path:
        return self._handle_dir(handle) / "home"

    def scratch(self, handle: RuntimeHandle) -> Path:
        base = self._handle_dir(handle)
        path = base / "scratch"
        if not path.exists():
            path.mkdir(mode=0o700, parents=True)
            own([path], self._user(base))
        return path

    # ------------------------------------------------------------------ the session's user
    def _user(self, base: Path) -> tuple[int, int] | None:
        """The (uid, gid) the session in `base` runs as (`local_layout.session_user`)."""
        return session_user(base, self.sandbox)

    def tmp(self, handle: RuntimeHandle) -> Path:
        """The session's TMPDIR."""
        return self._handle_dir(handle) / "tmp"

    def log_paths(self, handle: RuntimeHandle, log_name: str) -> tuple[Path, Path]:
        logs = self._handle_dir(handle) / "logs"
        return logs / f"{log_name}.stdout", logs / f"{log_name}.stderr"

    # ------------------------------------------------------------------ the gateway channel
    def channel_dir(self, handle: RuntimeHandle) -> Path:
        return self._handle_dir(handle) / "channel"

    def channel_in_sandbox(self, handle: RuntimeHandle) -> str | None:
        """The same path (the root sandbox shares the file system), SANDBOX_DIR in a bwrap
        sandbox (bound there); None when not sealed."""
        sandbox = self.sandbox
        if sandbox.mode == bwrap.MODE:
            return SANDBOX_DIR
        return str(self.channel_dir(handle)) if sandbox.sealed else None

    @contextlib.asynccontextmanager
    async def open_channel(self, handle: RuntimeHandle) -> AsyncIterator[socket.socket | None]:
        """The session's sandbox network while the block runs, with the worker listening on
        its loopback at SANDBOX_PORT: every `run` of the session meanwhile joins it, so the
        relay serving that socket is the command's only way out (no in-sandbox forwarder).
        None when not sealed, and for bwrap (its commands' forwarder serves that port)."""
        if not self.sandbox.loopback_channel:
            yield None
            return
        # a retried run may start here while the attempt it replaces, its harness already
        # reaped, is still closing its channel: wait for that, bounded
        deadline = asyncio.get_running_loop().time() + CHANNEL_CLOSE_WAIT_S
        while handle.session_id in self._channels:
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"the channel of {handle.session_id} is still open")
            await asyncio.sleep(0.05)
        net = await asyncio.to_thread(new_loopback, SANDBOX_PORT)
        self._channels[handle.session_id] = net
        try:
            yield net.listener
        finally:
            del self._channels[handle.session_id]
            net.close()

    # ------------------------------------------------------------------ lifecycle
    def _check_host_tools(self) -> None:
        """RuntimeUnfit naming what this host lacks for a sandbox: bash (every command), git
        (the workspace baseline) and, where commands serve the gateway with the in-sandbox
        forwarder (bwrap), python3 on the system PATH the sandbox sees."""
        tools = ["bash", "git"]
        path = None
        if self.sandbox.mode == bwrap.MODE:
            tools.append("python3")
            path = bwrap.SYSTEM_PATH
        missing = sandbox_needs.missing_on_host(tools, path)
        if missing:
            raise sandbox_needs.refuse(f"host {self.host_id!r}", missing)

    async def prepare(self, request: PrepareRequest) -> RuntimeHandle:
        if request.runtime.workdir != DEFAULT_WORKDIR:
            raise InvalidRuntime(
                f"workdir {request.runtime.workdir!r} is for container runtimes (docker, "
                f"podman): the {self.kind} runtime's workspace is a fresh dir on the worker host"
            )
        if request.runtime.harness_user is not None or request.step_users:
            raise InvalidRuntime(LOCAL_HARNESS_USER)
        if request.runtime.gpus:
            raise InvalidRuntime(LOCAL_GPUS)
        self._check_host_tools()
        base = self._session_dir(request.session_id)
        if base.exists():  # a retried prepare starts clean
            bare = RuntimeHandle(kind=self.kind, session_id=request.session_id, workdir="", host="")
            await self._remove(bare)
        workspace = base / "workspace"
        owned = [*(base / sub for sub in OWNED_DIRS), workspace]
        if request.source is None:  # the dirs, all empty: made and given in one hop
            await asyncio.to_thread(self._lay_out, base, owned)
        else:
            await asyncio.to_thread(self._make_dirs, base)
            # a dir copy or a git clone (up to GIT_TIMEOUT_S): heartbeating all the while
            await heartbeating(
                asyncio.to_thread(materialise_source, request.source, workspace, (self.root,)),
                step="materialising the source",
            )
            # the fresh dirs and the source (its tree may be big: one chown process)
            await asyncio.to_thread(own, owned, self._user(base))
        handle = RuntimeHandle(
            kind=self.kind,
            session_id=request.session_id,
            workdir=str(workspace),
            host=self.host_id,
        )
        await asyncio.to_thread(write_limits, base, request.runtime)
        await run_prepare_actions(
            self, handle, request.runtime.prepare, uploader(workspace, self.sandbox), (self.root,)
        )
        return handle

    def _lay_out(self, base: Path, owned: list[Path]) -> None:
        """A session without a source: its dirs, the workspace empty, given to the harness
        user in this process."""
        self._make_dirs(base)
        materialise_source(None, base / "workspace")
        (base / "workspace").chmod(0o700)
        own_in_process(owned, self._user(base))

    def _make_dirs(self, base: Path) -> None:
        sandbox = self.sandbox  # detected here at first use (it probes with processes)
        make_session_dirs(base, self.root, sandbox, self.uid_pool, self._pool_lock, self.python_dir)

    async def init_empty_workspace(
        self, handle: RuntimeHandle, make_repo: Callable[[Path], str]
    ) -> str | None:
        """`make_repo` in the worker when the workspace is empty (no source, no prepare
        action wrote there), its files then the harness user's; None, nothing done, when it
        has entries. Sealed, no command of the session is alive to race it: none outlives
        its PID namespace."""
        workspace = Path(handle.workdir)

        def make() -> str | None:
            if workspace.is_symlink() or any(os.scandir(workspace)):
                return None
            made = make_repo(workspace)
            own_in_process([workspace], self._user(workspace.parent))
            return made

        return await asyncio.to_thread(make)

    def _env(
        self, handle: RuntimeHandle, extra: dict[str, str], user: tuple[int, int] | None
    ) -> dict[str, str]:
        """A minimal environment: nothing of the worker's (its venv included)."""
        path = SYSTEM_PATH
        if usable_python_dir(self.python_dir):
            venv = self._handle_dir(handle) / "venv" / "bin"
            path = f"{venv}:{self.python_dir}:{path}"
        env = {
            "PATH": path,
            "LANG": "C.UTF-8",
            "HOME": str(self.home(handle)),
            "TMPDIR": str(self.tmp(handle)),
            SANDBOX_ENV: handle.session_id,
        }
        if user is not None:
            sandbox = self.sandbox
            name = HARNESS_USER if user[0] == sandbox.uid else f"{POOL_USER_PREFIX}{user[0]}"
            env["USER"] = env["LOGNAME"] = name
        env.update(extra)
        return env

    async def run(
        self,
        handle: RuntimeHandle,
        command: str,
        *,
        env: dict[str, str],
        log_name: str,
        timeout_s: float,
        on_tick: Callable[[float], Awaitable[None] | None] | None = None,
        pass_fds: Sequence[int] = (),
        user: str | None = None,
    ) -> ProcessOutcome:
        """`pass_fds`: descriptors of the worker's the command inherits (the started
        marker's pipe, activities/runtimes/started_marker.py). `user`: never honoured here
        (InvalidRuntime): the harness is the sandbox's own user."""
        if user is not None:
            raise InvalidRuntime(LOCAL_HARNESS_USER)
        stdout, stderr = self.log_paths(handle, log_name)
        opened = self._channels.get(handle.session_id)

        def ready() -> tuple[Sandbox, tuple[int, int] | None, Loopback | None, ContainerLimits]:
            # what the worker wrote there since (the harness config, the evaluator's inputs):
            # a few files, given in this process (a chown process costs more than the walk)
            base = self._handle_dir(handle)
            owner = self._user(base)
            own_in_process([self.home(handle), self.scratch(handle)], owner)
            sandbox = self.sandbox if owner is None else self.sandbox.as_user(*owner)
            limits = read_limits(base)
            if sandbox.loopback_channel and opened is None:  # a network of its own, only lo
                return sandbox, owner, new_loopback(), limits
            return sandbox, owner, None, limits

        # one hop to a thread, not three
        sandbox, owner, own_net, limits = await asyncio.to_thread(ready)
        base = self._handle_dir(handle)
        watchdog = DirsWatchdog(
            (Path(handle.workdir), *(base / sub for sub in (*OWNED_DIRS, PRIVATE_DIR))),
            limits.disk_bytes,
        )
        async with contextlib.AsyncExitStack() as stack:
            if own_net is not None:
                stack.callback(own_net.close)
            net = opened or own_net
            if sandbox.mode == bwrap.MODE:
                wrap = await asyncio.to_thread(self._bwrap_wrap, handle, stack)
            else:
                private = None
                if sandbox.mode in PRIVATE_MODES:  # its own /tmp, /var/tmp, /dev/shm
                    keep = (base, self.python_dir.parent, self.bin_dir.parent)
                    private = await asyncio.to_thread(private_dirs, base / PRIVATE_DIR, keep)
                wrap = list(sandbox.wrap(net, private))
                if owner is not None:  # a uid of the session's own: RLIMIT_NPROC is per session
                    prlimit = bwrap.tool("prlimit") or "prlimit"
                    wrap = [*bwrap.rlimit_argv(prlimit, limits, data=False), *wrap]
            return await watching_disk(
                lambda tick: run_shell(
                    command,
                    cwd=Path(handle.workdir),
                    env=self._env(handle, env, owner),
                    stdout=stdout,
                    stderr=stderr,
                    timeout_s=timeout_s,
                    on_tick=tick,
                    wrap=wrap,
                    pass_fds=pass_fds,
                ),
                watchdog,
                stderr,
                on_tick,
            )

    def _bwrap_wrap(self, handle: RuntimeHandle, stack: contextlib.AsyncExitStack) -> list[str]:
        """The argv prefix of one bwrap command: its cgroup (where delegated), its rlimits,
        and a sandbox of only this session's dirs (`stack` removes the cgroup after)."""
        base = self._handle_dir(handle)
        limits = read_limits(base)
        mounts = bwrap.Mounts(
            writable=(Path(handle.workdir), *(base / sub for sub in OWNED_DIRS)),
            channel=base / "channel",
            readonly=tuple(
                d for d in (self.python_dir.parent, self.bin_dir.parent) if d.is_absolute()
            ),
        )
        prefix: list[str] = []
        if self.cgroup is not None:
            child = stack.enter_context(self.cgroup.child(handle.session_id, limits))
            prefix += bwrap.cgroup_argv(child)
        prlimit = bwrap.tool("prlimit") or "prlimit"
        sandbox_bin = self.sandbox.prefix[0]
        cgroup_pids = self.cgroup is not None and self.cgroup.caps_pids()
        return [
            *prefix,
            *bwrap.rlimit_argv(prlimit, limits, nproc=not cgroup_pids),
            *bwrap.bwrap_argv(sandbox_bin, mounts, Path(handle.workdir), bwrap.tmpfs_bytes(limits)),
        ]

    async def reap(self, handle: RuntimeHandle) -> None:
        """Kill what a command of the session left alive (with a PID namespace there is
        nothing: the kernel killed it when the namespace ended; this checks), then drop the
        symlinks it left in home and scratch, where the worker writes and reads next."""
        base = self._handle_dir(handle)
        killed: list[int] = []
        for _ in range(REAP_ROUNDS):
            pids = await asyncio.to_thread(pids_with_env, f"{SANDBOX_ENV}={handle.session_id}")
            if not pids:
                break
            await asyncio.to_thread(kill_pids, pids)
            killed += pids
            await asyncio.sleep(0.05)
        if killed and self.sandbox.mode in ("sealed", bwrap.MODE, "pidns", "userns"):
            log.warning(
                "local session %s left processes alive: killed %s",
                handle.session_id,
                sorted(set(killed)),
            )
        await asyncio.to_thread(drop_symlinks, [base / "home", base / "scratch"])

    async def copy_workspace(
        self, handle: RuntimeHandle, dest: Path, junk: Collection[str] = ()
    ) -> list[str]:
        """The workspace copied by the worker itself into its empty `dest` (nothing runs in
        the sandbox; activities/runtimes/workspace.py); what was left out."""
        workspace = self._handle_dir(handle) / "workspace"
        return await asyncio.to_thread(copy_workspace_dir, workspace, dest, junk)

    async def disk_limit(self, handle: RuntimeHandle) -> int:
        return read_limits(self._handle_dir(handle)).disk_bytes

    async def read_files(
        self, handle: RuntimeHandle, folder: str, names: Collection[str], limit: int
    ) -> tuple[dict[str, bytes], dict[str, str]]:
        """Read by the worker, no-follow, from a folder of the session's own dir (elsewhere
        the sandbox's view of a path is not the worker's: InvalidRuntime)."""
        base, path = self._handle_dir(handle), Path(folder)
        if not path.is_relative_to(base) or ".." in path.parts:
            raise InvalidRuntime(f"the local runtime reads no {folder!r} outside its session dir")
        found: dict[str, bytes] = {}
        odd: dict[str, str] = {}
        for name in names:
            try:
                data = safe_files.read_bytes(path, name, limit=limit)
            except safe_files.UnsafePath as exc:
                odd[name] = str(exc)
                continue
            if data is not None:
                found[name] = data
        return found, odd

    async def teardown(self, handle: RuntimeHandle) -> bool:
        """Remove the session dir (its processes first); whether there was one."""
        return await self._remove(handle)

    async def _remove(self, handle: RuntimeHandle) -> bool:
        base = self._handle_dir(handle)
        await self.reap(handle)
        if base.exists():
            await asyncio.to_thread(rmtree, base)
            return True
        return False

    async def list_sessions(self) -> set[str]:
        """Session ids with a session dir under this runtime's root."""
        return await asyncio.to_thread(session_dirs, self.root)

"""The `docker` runtime: one container per session, driven through the docker SDK.

The container runs the task's image (default `polar/runtime:py311`, built locally by
infra/images/build.py) with no network at all (`--network none`; with sidecars, a network
of its own and theirs alone: docker_sidecars.py): its only way out is the session's
gateway channel, a Unix socket in the worker's `{session}/channel/` dir bind-mounted
read-only at /run/polar (the only mount), served by the worker's relay and reached through
a forwarder on the container's own loopback (activities/runtimes/network/channel.py). It
has the CPU, memory (no extra swap), pids and disk limits of the RuntimeSpec (on by
default); the source goes in with `put_archive` (a dir copy, or a git clone at the task's
ref made on the worker), into the workspace: the spec's `workdir` (default `/workspace`).

Its main process sleeps until the session's wall-clock deadline under docker-init, and is
Polar's own read-only busybox (activities/runtimes/toolbox.py), never a program of the
image's, so the whole container stops when the budget is spent, even if the worker died.
Commands run with `docker exec` in their own session, under the exit sweep
(activities/runtimes/exit_sweep.py: what a command detached is killed the moment it exits,
from inside). `reap` kills every process in the container (SIGKILL to its init: the kernel
takes the rest of its PID namespace) and starts it again with the same file system: the
harness stage reaps after every harness exit, so nothing the harness left running touches
its work once it is read. A timeout or a cancellation reaps the same way. The disk
limit is the file-size rlimit for a single file plus a watchdog over the container's
writable layer, checked on every tick of a running command (the engine's
`--storage-opt size` needs an XFS backing store, which these hosts do not have). A
session's GPUs go in as device requests (gpu_devices.py).

The worker keeps, under `{data_dir}/runtimes/{session_id}/`, `logs/` (each command's
stdout and stderr, streamed as it runs), `home/` and `scratch/`, which appear at the same
paths inside the container: copied in before each command and back after it (given to the
spec's `harness_user` for its runs), so the Runtime protocol (write a config or an input
file, run, read a result file) is the same as for the local runtime. Teardown removes the
container (by its name: a bare handle works), its sidecars and the host dir.

Container names: a worker's runtime is built with its deployment's `namespace` (the task
queue), so the name is `polar-{namespace}-{session_id}` on every worker of it, whatever its
data dir: one engine shared by several workers finds any of their containers. Labels say
whose container it is (`polar.session`, `polar.namespace`, `polar.host`,
`polar.deployment`: Temporal address, namespace and queue), which is how a host's sweep
finds its own (`list_sessions`). A runtime made without a namespace (tests, benchmarks)
uses a hash of its root instead, so runs sharing an engine never collide. The engine is
the one `DOCKER_HOST` names (default: the local socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import docker
from docker.errors import APIError, ImageNotFound, NotFound

from activities.heartbeat import heartbeating
from activities.runtimes import toolbox
from activities.runtimes.actions import run_prepare_actions
from activities.runtimes.base import InvalidRuntime, image_missing
from activities.runtimes.exit_sweep import with_exit_sweep
from activities.runtimes.gpu_devices import docker_device_requests
from activities.runtimes.kinds.container_exec import ContainerDiskWatchdog, ExecPump, LogPump
from activities.runtimes.kinds.container_files import ContainerFiles
from activities.runtimes.kinds.container_names import container_name, root_namespace
from activities.runtimes.kinds.container_services import ContainerServices
from activities.runtimes.kinds.container_user import harness_uid
from activities.runtimes.kinds.docker_sidecars import remove_sidecars, sidecar_name, start_sidecars
from activities.runtimes.kinds.sidecar_readiness import in_stoppable_thread
from activities.runtimes.network.channel_paths import SANDBOX_DIR
from activities.runtimes.resource_limits import DISK_LABEL, ContainerLimits
from activities.runtimes.workspace import (
    session_dir,
    session_dirs,
)
from activities.shell_command import ProcessOutcome
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.tasks.spec import RuntimeSpec

LABEL = "polar.session"
NAMESPACE_LABEL = "polar.namespace"
HOST_LABEL = "polar.host"
DEPLOYMENT_LABEL = "polar.deployment"
DEADLINE_ENV = "POLAR_DEADLINE"
# the main process: sleep until the wall-clock deadline (survives a reap's restart), Polar's
# own read-only busybox, never a program of the image's (which the harness may have replaced)
MAIN_COMMAND = toolbox.main_command(DEADLINE_ENV)
PROVIDE_IMAGE = (
    "build it there (`python infra/images/build.py` builds Polar's own; `docker build` or "
    "`docker load` a task's)"
)


class DockerRuntime(ContainerFiles, ContainerServices):
    kind = "docker"
    passes_fds = False  # commands start in the engine (`docker exec`), not here

    def __init__(
        self,
        root: Path,
        client: docker.DockerClient | None = None,
        *,
        namespace: str | None = None,
        host_id: str | None = None,
        deployment: str | None = None,
    ) -> None:
        self.root = root.resolve()
        self._client = client
        self.namespace = namespace or root_namespace(self.root)
        self.host_id = host_id or socket.gethostname()
        self.deployment = deployment or self.namespace

    def container_name(self, session_id: str) -> str:
        return container_name(session_id, self.namespace)

    def labels(self, session_id: str) -> dict[str, str]:
        """Whose container it is: the session, the deployment namespace, the host."""
        return {
            LABEL: session_id,
            NAMESPACE_LABEL: self.namespace,
            HOST_LABEL: self.host_id,
            DEPLOYMENT_LABEL: self.deployment,
        }

    async def list_sessions(self) -> set[str]:
        """Session ids with a container of this deployment and host, or a session dir here."""

        def listed() -> set[str]:
            filters: dict[str, str | list[str] | bool] = {
                "label": [f"{DEPLOYMENT_LABEL}={self.deployment}", f"{HOST_LABEL}={self.host_id}"]
            }
            found = {
                c.labels.get(LABEL, "")
                for c in self.client.containers.list(all=True, filters=filters)
            }
            return (found - {""}) | session_dirs(self.root)

        return await asyncio.to_thread(listed)

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker.from_env(timeout=120)
        return self._client

    # ------------------------------------------------------------------ host side paths
    def _session_dir(self, session_id: str) -> Path:
        return session_dir(self.root, session_id)

    def home(self, handle: RuntimeHandle) -> Path:
        path = self._session_dir(handle.session_id) / "home"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def scratch(self, handle: RuntimeHandle) -> Path:
        path = self._session_dir(handle.session_id) / "scratch"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def log_paths(self, handle: RuntimeHandle, log_name: str) -> tuple[Path, Path]:
        logs = self._session_dir(handle.session_id) / "logs"
        return logs / f"{log_name}.stdout", logs / f"{log_name}.stderr"

    # ------------------------------------------------------------------ lifecycle
    async def prepare(self, request: PrepareRequest) -> RuntimeHandle:
        spec = request.runtime
        await self._remove_container(request.session_id)  # a retried prepare starts clean
        base = self._session_dir(request.session_id)
        if base.exists():
            await asyncio.to_thread(shutil.rmtree, base)
        for sub in ("home", "scratch", "logs", "channel"):
            (base / sub).mkdir(parents=True)
        (base / "channel").chmod(0o755)
        handle = RuntimeHandle(
            kind=self.kind,
            session_id=request.session_id,
            workdir=spec.workdir,
            host=self.host_id,
            harness_user=spec.harness_user,
        )
        self._check_workdir(handle)
        try:
            # with sidecars: started in order and waited for (up to their healthchecks' bounds)
            container = await heartbeating(
                in_stoppable_thread(self._create, request.session_id, spec),
                step="starting the container" + (" and its sidecars" if spec.sidecars else ""),
            )
            # an image without a shell is refused now, naming it
            await asyncio.to_thread(self._check_sandbox_tools, container, spec.image)
            for user in sorted({u for u in (spec.harness_user, *request.step_users) if u}):
                # a user the image lacks: refused now, named
                await asyncio.to_thread(harness_uid, container, user, spec.image)
            mkdirs = [handle.workdir, str(self.home(handle)), str(self.scratch(handle))]
            await asyncio.to_thread(self._mkdirs, container, mkdirs)
            # a dir copy or a git clone (up to GIT_TIMEOUT_S) made on the worker
            await heartbeating(
                asyncio.to_thread(self._put_source, container, request),
                step="copying the source in",
            )
            await run_prepare_actions(
                self,
                handle,
                spec.prepare,
                lambda src, dest: self._upload(container, handle.workdir, src, dest),
                forbidden=(self.root,),
            )
        except BaseException:
            with contextlib.suppress(Exception):
                await self._remove_container(request.session_id)
            raise
        return handle

    def _check_workdir(self, handle: RuntimeHandle) -> None:
        """InvalidRuntime where the workspace would be at, in or above the session's home or
        scratch (the worker's paths, mirrored into the container)."""
        workdir = PurePosixPath(handle.workdir)
        for name, path in (("home", self.home(handle)), ("scratch", self.scratch(handle))):
            mirrored = PurePosixPath(path)
            if workdir.is_relative_to(mirrored) or mirrored.is_relative_to(workdir):
                raise InvalidRuntime(
                    f"workdir {handle.workdir!r} overlaps the session's {name} {mirrored}: "
                    "choose a workspace outside the worker's data dir"
                )

    def _create(self, session_id: str, spec: RuntimeSpec) -> Any:
        try:
            self.client.images.get(spec.image)
        except ImageNotFound:  # said once, as the task's error: not the engine's 404
            raise image_missing("docker", spec.image, PROVIDE_IMAGE) from None
        limits = ContainerLimits.of(spec)
        channel = self._session_dir(session_id) / "channel"
        name, labels = self.container_name(session_id), self.labels(session_id)
        net = None
        if spec.sidecars:  # started in order and ready before the session's container
            net = start_sidecars(self.client, name, labels, spec.sidecars, spec.depends_on)
        return self.client.containers.run(
            spec.image,
            MAIN_COMMAND,
            name=name,
            labels=labels | {DISK_LABEL: str(limits.disk_bytes)},
            environment={DEADLINE_ENV: str(int(time.time() + max(1.0, spec.wall_clock_s)))},
            detach=True,
            init=True,
            network_mode="none" if net is None else None,  # else its own, its sidecars' alone
            network=net,
            volumes={str(channel): {"bind": SANDBOX_DIR, "mode": "ro"}}
            | toolbox.docker_volumes(self.root),
            working_dir="/",
            security_opt=["no-new-privileges"],
            device_requests=docker_device_requests(spec.gpus),  # none unless it asks for GPUs
            pids_limit=limits.pids,
            nano_cpus=int(limits.cpus * 1e9),
            mem_limit=limits.memory_bytes,
            memswap_limit=limits.memory_bytes,  # no swap beyond the limit
            ulimits=[
                docker.types.Ulimit(name="fsize", soft=limits.disk_bytes, hard=limits.disk_bytes)
            ],
        )

    # ------------------------------------------------------------------ the gateway channel
    def channel_dir(self, handle: RuntimeHandle) -> Path:
        return self._session_dir(handle.session_id) / "channel"

    def channel_in_sandbox(self, handle: RuntimeHandle) -> str | None:
        return SANDBOX_DIR

    @contextlib.asynccontextmanager
    async def open_channel(self, handle: RuntimeHandle) -> AsyncIterator[socket.socket | None]:
        """None: the container's own forwarder serves its loopback (`with_forwarder`), the
        worker cannot listen in the container's network (it may not even see its pid)."""
        yield None

    async def init_empty_workspace(
        self, handle: RuntimeHandle, make_repo: Callable[[Path], str]
    ) -> str | None:
        """None: the workspace is in the container, the baseline script makes its repo."""
        return None

    # ------------------------------------------------------------------ reaping
    async def reap(self, handle: RuntimeHandle) -> None:
        await asyncio.to_thread(self._reap, self._container(handle))

    def _reap(self, container: Any) -> None:
        """SIGKILL the container's init (the kernel kills everything else in it), then start
        it again on the same file system; a container past its deadline stays stopped."""
        with contextlib.suppress(APIError):  # not running: nothing to kill
            container.kill(signal="SIGKILL")
        container.wait(timeout=60)
        container.start()

    async def teardown(self, handle: RuntimeHandle) -> bool:
        """Remove the container and the session dir; whether there was either to remove."""
        removed = await self._remove_container(handle.session_id)
        base = self._session_dir(handle.session_id)
        if base.exists():
            await asyncio.to_thread(shutil.rmtree, base, True)
            removed = True
        return removed

    async def _remove_container(self, session_id: str) -> bool:
        def remove() -> bool:
            name, removed = self.container_name(session_id), True
            try:
                self.client.containers.get(name).remove(force=True, v=True)
            except NotFound:
                removed = False
            labels = [f"{LABEL}={session_id}", f"{NAMESPACE_LABEL}={self.namespace}"]
            return remove_sidecars(self.client, name, labels) or removed

        return await asyncio.to_thread(remove)

    def _container(self, handle: RuntimeHandle) -> Any:
        return self.client.containers.get(self.container_name(handle.session_id))

    def _sidecar_container(self, handle: RuntimeHandle, name: str) -> Any:
        if self.kind != "docker":  # a subclass's engine (podman) has its own, or none
            return super()._sidecar_container(handle, name)
        return self.client.containers.get(
            sidecar_name(self.container_name(handle.session_id), name)
        )

    # ------------------------------------------------------------------ commands
    async def run(
        self,
        handle: RuntimeHandle,
        command: str,
        *,
        env: dict[str, str],
        log_name: str,
        timeout_s: float,
        on_tick: Callable[[float], Awaitable[None] | None] | None = None,
        tick_s: float = 2.0,
        pass_fds: Sequence[int] = (),
        user: str | None = None,
    ) -> ProcessOutcome:
        if pass_fds:  # the command starts in the engine: no descriptor of ours reaches it
            raise ValueError("a container runtime passes no descriptors (passes_fds is False)")
        stdout, stderr = self.log_paths(handle, log_name)
        stdout.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        container = await asyncio.to_thread(self._container, handle)
        if container.status != "running":
            with open(stderr, "a") as err:
                err.write(f"polar: container is {container.status} (wall-clock budget spent?)\n")
            return ProcessOutcome(None, True, time.monotonic() - started)
        await asyncio.to_thread(self._sync_in, container, handle, user)
        full_env = {"HOME": str(self.home(handle))} | env
        # nothing the command detached outlives it (the reap below comes seconds later)
        # every program the toolbox's: the image needs no bash nor setsid
        sweep = with_exit_sweep(command, toolbox.BASH, toolbox.BIN)
        argv = [toolbox.HELPER, "setsid", toolbox.BASH, "-c", sweep]
        pump = await asyncio.to_thread(
            self._start_exec, container, argv, full_env, handle.workdir, stdout, stderr, user
        )
        watchdog = ContainerDiskWatchdog(container)
        try:
            while True:
                remaining = timeout_s - (time.monotonic() - started)
                if remaining <= 0:
                    await asyncio.to_thread(self._reap, container)
                    return ProcessOutcome(None, True, time.monotonic() - started)
                if await asyncio.to_thread(pump.done.wait, min(tick_s, remaining)):
                    break
                exceeded = await asyncio.to_thread(watchdog.exceeded)
                if exceeded:
                    with open(stderr, "a") as err:
                        err.write(f"polar: {exceeded}; every process of the session killed\n")
                    await asyncio.to_thread(self._reap, container)
                    return ProcessOutcome(None, False, time.monotonic() - started, exceeded)
                if on_tick is not None:
                    maybe = on_tick(time.monotonic() - started)
                    if maybe is not None:
                        await maybe
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(asyncio.to_thread(self._reap, container))
            raise
        finally:
            with contextlib.suppress(NotFound, APIError):
                await asyncio.to_thread(self._sync_out, container, handle)
        if pump.error is not None:
            raise pump.error
        code = await asyncio.to_thread(pump.exit_code)
        # what was written between the last tick and the exit counts too
        exceeded = await asyncio.to_thread(watchdog.exceeded)
        if exceeded:
            with open(stderr, "a") as err:
                err.write(f"polar: {exceeded}\n")
        return ProcessOutcome(code, False, time.monotonic() - started, exceeded)

    def _start_exec(
        self,
        container: Any,
        argv: list[str],
        env: dict[str, str],
        workdir: str,
        stdout: Path,
        stderr: Path,
        user: str | None = None,
    ) -> ExecPump:
        """Start `argv` in the container (as `user`, else the image's), its output streaming
        into the two log files."""
        created = self.client.api.exec_create(
            container.id,
            argv,
            stdout=True,
            stderr=True,
            environment=env,
            workdir=workdir,
            user=user or "",
        )
        pump = LogPump(self.client, created["Id"], stdout, stderr)
        pump.start()
        return pump

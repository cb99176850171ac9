"""The `docker` runtime: one container per session, driven through the docker SDK.

The container runs the task's image (default `polar/runtime:py311`, built
locally by infra/images/build.py) with host networking (the gateway is on
127.0.0.1), the CPU and memory limits of the RuntimeSpec, a pids limit, and
no mounts at all: the source goes in with `put_archive` (a dir copy, or a git
clone at the task's ref made on the worker), into `/workspace`.

Its main process is `sleep {wall_clock_s}` under docker-init, so the whole
container stops when the session's wall-clock budget is spent, even if the
worker died. Commands run with `docker exec` in their own session (`setsid`),
so a timeout or a cancellation kills everything they started.

The worker keeps, under `{data_dir}/runtimes/{session_id}/`, `logs/` (each
command's stdout and stderr, streamed as it runs), `home/` and `scratch/`.
`home/` and `scratch/` appear at the same absolute paths inside the
container: they are copied in before each command and copied back after it,
so the Runtime protocol (write a config or an input file, run, read a result
file) is the same as for the local runtime. Teardown always removes the
container (by its name, so it works from a bare handle) and the host dir.

The engine is the one `DOCKER_HOST` names (default: the local socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import re
import shutil
import socket
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath
from typing import Any

import docker
from docker.errors import APIError, ImageNotFound, NotFound

from activities.process import ProcessOutcome
from activities.runtimes.actions import run_prepare_actions
from activities.runtimes.base import InvalidRuntime
from activities.runtimes.local import materialise_source
from polar.models import PrepareRequest, RuntimeHandle, RuntimeSpec

WORKSPACE = "/workspace"
LABEL = "polar.session"
PIDS_LIMIT = 4096
KILL_GRACE_S = 5.0


def container_name(session_id: str, root: Path) -> str:
    """A docker-safe, deterministic container name for a session of the worker data dir `root`.

    The data dir's hash keeps two stacks (e.g. a dev stack and a test run)
    sharing one engine from colliding on equal session ids.
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", session_id)
    tag = hashlib.sha256(str(root).encode()).hexdigest()[:8]
    return f"polar-{tag}-{safe}"[:200]


class DockerRuntime:
    kind = "docker"

    def __init__(self, root: Path, client: docker.DockerClient | None = None) -> None:
        self.root = root.resolve()
        self._client = client

    def container_name(self, session_id: str) -> str:
        return container_name(session_id, self.root)

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker.from_env(timeout=120)
        return self._client

    # ------------------------------------------------------------------ host side paths
    def _session_dir(self, session_id: str) -> Path:
        return self.root / session_id

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
        for sub in ("home", "scratch", "logs"):
            (base / sub).mkdir(parents=True)
        handle = RuntimeHandle(
            kind=self.kind,
            session_id=request.session_id,
            workdir=WORKSPACE,
            host=socket.gethostname(),
        )
        try:
            container = await asyncio.to_thread(self._create, request.session_id, spec)
            mkdirs = [WORKSPACE, str(self.home(handle)), str(self.scratch(handle))]
            await asyncio.to_thread(self._exec_checked, container, ["mkdir", "-p", *mkdirs])
            await asyncio.to_thread(self._put_source, container, request)
            await run_prepare_actions(
                self, handle, spec.prepare, lambda src, dest: self._upload(container, src, dest)
            )
        except BaseException:
            with contextlib.suppress(Exception):
                await self._remove_container(request.session_id)
            raise
        return handle

    def _create(self, session_id: str, spec: RuntimeSpec) -> Any:
        try:
            self.client.images.get(spec.image)
        except ImageNotFound as exc:
            raise InvalidRuntime(
                f"docker image {spec.image!r} not found (build it: python infra/images/build.py)"
            ) from exc
        limits: dict[str, Any] = {"pids_limit": PIDS_LIMIT}
        if spec.cpus is not None:
            limits["nano_cpus"] = int(spec.cpus * 1e9)
        if spec.memory is not None:
            limits["mem_limit"] = spec.memory
            limits["memswap_limit"] = spec.memory  # no swap beyond the limit
        return self.client.containers.run(
            spec.image,
            ["sleep", str(max(1, int(spec.wall_clock_s)))],
            name=self.container_name(session_id),
            labels={LABEL: session_id},
            detach=True,
            init=True,
            network_mode="host",
            working_dir="/",
            security_opt=["no-new-privileges"],
            **limits,
        )

    async def teardown(self, handle: RuntimeHandle) -> None:
        await self._remove_container(handle.session_id)
        base = self._session_dir(handle.session_id)
        if base.exists():
            await asyncio.to_thread(shutil.rmtree, base, True)

    async def _remove_container(self, session_id: str) -> None:
        def remove() -> None:
            with contextlib.suppress(NotFound):
                self.client.containers.get(self.container_name(session_id)).remove(
                    force=True, v=True
                )

        await asyncio.to_thread(remove)

    def _container(self, handle: RuntimeHandle) -> Any:
        return self.client.containers.get(self.container_name(handle.session_id))

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
    ) -> ProcessOutcome:
        stdout, stderr = self.log_paths(handle, log_name)
        stdout.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        container = await asyncio.to_thread(self._container, handle)
        if container.status != "running":
            with open(stderr, "a") as err:
                err.write(f"polar: container is {container.status} (wall-clock budget spent?)\n")
            return ProcessOutcome(None, True, time.monotonic() - started)
        await asyncio.to_thread(self._sync_in, container, handle)
        pidfile = f"/tmp/.polar-{uuid.uuid4().hex}.pid"
        full_env = {"HOME": str(self.home(handle))} | env
        argv = ["setsid", "-w", "bash", "-c", 'echo $$ > "$0"; exec bash -c "$1"', pidfile, command]
        pump = await asyncio.to_thread(
            self._start_exec, container, argv, full_env, handle.workdir, stdout, stderr
        )
        try:
            while True:
                remaining = timeout_s - (time.monotonic() - started)
                if remaining <= 0:
                    await self._kill(container, pidfile, pump)
                    return ProcessOutcome(None, True, time.monotonic() - started)
                if await asyncio.to_thread(pump.done.wait, min(tick_s, remaining)):
                    break
                if on_tick is not None:
                    maybe = on_tick(time.monotonic() - started)
                    if maybe is not None:
                        await maybe
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._kill(container, pidfile, pump))
            raise
        finally:
            with contextlib.suppress(NotFound, APIError):
                await asyncio.to_thread(self._sync_out, container, handle)
        if pump.error is not None:
            raise pump.error
        code = await asyncio.to_thread(pump.exit_code)
        return ProcessOutcome(code, False, time.monotonic() - started)

    def _start_exec(
        self, container: Any, argv: list[str], env: dict[str, str], workdir: str,
        stdout: Path, stderr: Path,
    ) -> _Pump:  # fmt: skip
        """Start `argv` in the container, its output streaming into the two log files."""
        created = self.client.api.exec_create(
            container.id, argv, stdout=True, stderr=True, environment=env, workdir=workdir
        )
        pump = _Pump(self.client, created["Id"], stdout, stderr)
        pump.start()
        return pump

    async def _kill(self, container: Any, pidfile: str, pump: _Pump) -> None:
        """SIGTERM the command's process group, then SIGKILL after a grace period."""
        for sig in ("TERM", "KILL"):
            script = f'pg=$(cat {pidfile} 2>/dev/null) && kill -{sig} -- "-$pg"'
            with contextlib.suppress(NotFound, APIError):
                await asyncio.to_thread(container.exec_run, ["bash", "-c", script])
            if await asyncio.to_thread(pump.done.wait, KILL_GRACE_S):
                return
        # something outside the group still holds the output open: the pump thread
        # ends when teardown removes the container

    # ------------------------------------------------------------------ copying in and out
    def _exec_checked(self, container: Any, cmd: list[str]) -> str:
        result = container.exec_run(cmd)
        output = result.output.decode(errors="replace")
        if result.exit_code != 0:
            raise InvalidRuntime(f"{cmd!r} failed in the container: {output.strip()}")
        return output

    def _put_source(self, container: Any, request: PrepareRequest) -> None:
        if request.source is None:
            return
        with tempfile.TemporaryDirectory(prefix="polar-src-") as tmp:
            workspace = Path(tmp) / "workspace"
            materialise_source(request.source, workspace)  # dir copy or git clone at ref
            _put_dir_contents(container, workspace, WORKSPACE)

    async def _upload(self, container: Any, src: Path, dest: str) -> None:
        target = PurePosixPath(dest) if dest.startswith("/") else PurePosixPath(WORKSPACE) / dest
        await asyncio.to_thread(self._exec_checked, container, ["mkdir", "-p", str(target.parent)])
        await asyncio.to_thread(_put_path, container, src, target)

    def _sync_in(self, container: Any, handle: RuntimeHandle) -> None:
        """Make the container's home and scratch mirror the worker's."""
        dirs = [self.home(handle), self.scratch(handle)]
        self._exec_checked(
            container, ["bash", "-c", 'rm -rf "$@" && mkdir -p "$@"', "_", *map(str, dirs)]
        )
        for path in dirs:
            _put_dir_contents(container, path, str(path))

    def _sync_out(self, container: Any, handle: RuntimeHandle) -> None:
        """Make the worker's home and scratch mirror the container's."""
        for path in (self.home(handle), self.scratch(handle)):
            stream, _ = container.get_archive(str(path))
            with tempfile.TemporaryFile() as buf:
                for chunk in stream:
                    buf.write(chunk)
                buf.seek(0)
                fresh = path.with_name(path.name + ".incoming")
                shutil.rmtree(fresh, ignore_errors=True)
                fresh.mkdir()
                with tarfile.open(fileobj=buf) as tar:
                    members = []
                    for member in tar.getmembers():
                        parts = PurePosixPath(member.name).parts[1:]  # drop the top dir
                        if not parts:
                            continue
                        member.name = str(PurePosixPath(*parts))
                        members.append(member)
                    tar.extractall(fresh, members=members, filter="data")
                shutil.rmtree(path)
                fresh.rename(path)


class _Pump(threading.Thread):
    """Stream an exec's stdout and stderr into log files, in a thread."""

    def __init__(self, client: docker.DockerClient, exec_id: str, out: Path, err: Path) -> None:
        super().__init__(daemon=True, name=f"polar-exec-{exec_id[:12]}")
        self.client, self.exec_id, self.out, self.err = client, exec_id, out, err
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with open(self.out, "ab") as out, open(self.err, "ab") as err:
                stream = self.client.api.exec_start(self.exec_id, stream=True, demux=True)
                for chunk_out, chunk_err in stream:
                    if chunk_out:
                        out.write(chunk_out)
                        out.flush()
                    if chunk_err:
                        err.write(chunk_err)
                        err.flush()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            self.error = exc
        finally:
            self.done.set()

    def exit_code(self) -> int | None:
        return self.client.api.exec_inspect(self.exec_id)["ExitCode"]


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _put_tar(container: Any, dest_dir: str, fill: Callable[[tarfile.TarFile], None]) -> None:
    with tempfile.TemporaryFile() as buf:
        with tarfile.open(fileobj=buf, mode="w") as tar:
            fill(tar)
        size = buf.tell()
        buf.seek(0)
        data = buf if size > 64 * 1024 * 1024 else io.BytesIO(buf.read())
        if not container.put_archive(dest_dir, data):
            raise InvalidRuntime(f"copying into {dest_dir} in the container failed")


def _put_dir_contents(container: Any, src: Path, dest_dir: str) -> None:
    """Copy the contents of host dir `src` into existing container dir `dest_dir`."""

    def fill(tar: tarfile.TarFile) -> None:
        for child in sorted(src.iterdir()):
            tar.add(child, arcname=child.name, filter=_owned_by_root)

    _put_tar(container, dest_dir, fill)


def _put_path(container: Any, src: Path, target: PurePosixPath) -> None:
    """Copy host file or dir `src` to the container path `target` (its parent exists)."""

    def fill(tar: tarfile.TarFile) -> None:
        tar.add(src, arcname=target.name, filter=_owned_by_root)

    _put_tar(container, str(target.parent), fill)

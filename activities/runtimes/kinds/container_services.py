"""A container runtime's services after the harness (docker, podman): commands run in the
session's container or a sidecar, paths streamed out of them, files put back into a fresh
runtime (what `RuntimeSpec.collect` needs: activities/artifact_collection.py and
activities/artifact_placement.py).

Out: the engine's archive of a path, as a stream (`docker cp`'s, `podman cp -`'s), read by
the collector within its bounds and dropped there; nothing is extracted on the worker. In:
a worker file or folder put at an absolute path as root, replacing what was there.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from docker.errors import NotFound

from activities.runtimes import toolbox
from activities.runtimes.base import InvalidRuntime
from activities.runtimes.kinds.container_archive import put_path
from activities.runtimes.kinds.container_exec import ExecPump
from activities.runtimes.kinds.podman_cli import PodmanContainer
from activities.shell_command import ProcessOutcome
from polar.contracts import RuntimeHandle
from polar.tasks.collect_spec import MAIN

__all__ = ["ContainerServices"]

CHUNK = 1 << 16


class ContainerServices:
    """The services half of DockerRuntime (and so PodmanRuntime)."""

    kind: str

    def _sidecar_container(self, handle: RuntimeHandle, name: str) -> Any:
        raise InvalidRuntime(f"the {self.kind} runtime runs no sidecars")

    if TYPE_CHECKING:  # DockerRuntime's

        def _container(self, handle: RuntimeHandle) -> Any: ...

        def log_paths(self, handle: RuntimeHandle, log_name: str) -> tuple[Path, Path]: ...

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
        ) -> ProcessOutcome: ...

        def _start_exec(
            self,
            container: Any,
            argv: list[str],
            env: dict[str, str],
            workdir: str,
            stdout: Path,
            stderr: Path,
            user: str | None = None,
        ) -> ExecPump: ...

    def _service_container(self, handle: RuntimeHandle, service: str) -> Any:
        if service == MAIN:
            return self._container(handle)
        return self._sidecar_container(handle, service)

    async def service_exec(
        self,
        handle: RuntimeHandle,
        service: str,
        command: str,
        *,
        timeout_s: float,
        user: str | None,
        log_name: str,
    ) -> ProcessOutcome:
        """`command` in `service`: in the session's container as every command there runs
        (the toolbox's bash in the workspace, what it leaves swept); in a sidecar with its own
        `sh`, in its own working dir (a sidecar is any image, as Harbor runs it there), left
        running where it outlives `timeout_s` (the sidecar goes with the session)."""
        if service == MAIN:
            return await self.run(
                handle, command, env={}, log_name=log_name, timeout_s=timeout_s, user=user
            )
        started = time.monotonic()
        container = await asyncio.to_thread(self._service_container, handle, service)
        stdout, stderr = self.log_paths(handle, log_name)
        stdout.parent.mkdir(parents=True, exist_ok=True)
        workdir = (container.attrs.get("Config") or {}).get("WorkingDir") or "/"
        pump = await asyncio.to_thread(
            self._start_exec, container, ["sh", "-c", command], {}, workdir, stdout, stderr, user
        )
        if not await asyncio.to_thread(pump.done.wait, timeout_s):
            return ProcessOutcome(None, True, time.monotonic() - started)
        if pump.error is not None:
            raise pump.error
        code = await asyncio.to_thread(pump.exit_code)
        return ProcessOutcome(code, False, time.monotonic() - started)

    @contextlib.contextmanager
    def archive_stream(self, handle: RuntimeHandle, service: str, path: str) -> Iterator[Any]:
        """The engine's tar archive of `path` in `service`, as an iterator of chunks, dropped
        when the block ends (read or not); FileNotFoundError where there is no such path."""
        container = self._service_container(handle, service)
        if isinstance(container, PodmanContainer):
            yield from _podman_stream(container, path)
            return
        try:
            chunks, _ = container.get_archive(path, chunk_size=CHUNK)
        except NotFound:
            raise FileNotFoundError(path) from None
        try:
            yield chunks
        finally:
            with contextlib.suppress(Exception):
                chunks.close()

    def resolved_path(self, handle: RuntimeHandle, path: str) -> str | None:
        """`path` in the session's container with every link in it resolved (the toolbox's
        `realpath`, as root); None where it does not exist."""
        container = self._container(handle)
        result = container.exec_run([toolbox.BUSYBOX, "realpath", path], user="0")
        if result.exit_code != 0:
            return None
        out: bytes = result.output
        return out.decode(errors="replace").strip()

    async def put_artifact(self, handle: RuntimeHandle, src: Path, target: str) -> None:
        """The worker's file or folder `src` at the absolute `target`, as root, replacing
        what was there (its parent made)."""
        path = PurePosixPath(target)
        bb = toolbox.BUSYBOX
        script = f'{bb} rm -rf -- "$1" && {bb} mkdir -p -- "$2"'

        def put() -> None:
            container = self._container(handle)
            argv = [bb, "sh", "-c", script, "_", str(path), str(path.parent)]
            result = container.exec_run(argv, user="0")
            if result.exit_code != 0:
                out = result.output.decode(errors="replace").strip()
                raise InvalidRuntime(f"cannot make room for {target}: {out[-300:]}")
            put_path(container, src, path)

        await asyncio.to_thread(put)


def _podman_stream(container: PodmanContainer, path: str) -> Iterator[Iterator[bytes]]:
    """`podman cp NAME:path -`'s stdout as chunks; the process killed when dropped."""
    proc = container.podman.popen(
        "cp",
        f"{container.name}:{path}",
        "-",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.read(CHUNK)
        if not first:
            err = proc.stderr.read(2000) if proc.stderr is not None else b""
            proc.wait(timeout=30)
            raise FileNotFoundError(f"{path}: {err.decode(errors='replace').strip()}")

        def chunks() -> Iterator[bytes]:
            yield first
            assert proc.stdout is not None
            while chunk := proc.stdout.read(CHUNK):
                yield chunk

        yield chunks()
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(timeout=30)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

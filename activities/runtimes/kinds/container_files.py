"""A container runtime's copies in and out of its container (docker, podman): the source,
uploads, the mirrored home and scratch, the workspace out to the worker and the worker's
files back into it. Every program run in the container for them is the toolbox's
(activities/runtimes/toolbox.py), never the image's."""

from __future__ import annotations

import asyncio
import functools
import shutil
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from activities.runtimes import toolbox
from activities.runtimes.base import InvalidRuntime
from activities.runtimes.kinds.container_archive import (
    SKIPPED_NOTE,
    archive_into,
    put_dir_contents,
    put_entries,
    put_path,
    read_members,
    retried,
)
from activities.runtimes.kinds.container_user import give_dirs, harness_uid
from activities.runtimes.resource_limits import DISK_LABEL
from activities.runtimes.sandboxes import needs as sandbox_needs
from activities.runtimes.workspace import drop_alternates, materialise_source
from polar.contracts import PrepareRequest, RuntimeHandle


class ContainerFiles:
    """The copying half of DockerRuntime (and so PodmanRuntime)."""

    kind: str
    root: Path

    def _container(self, handle: RuntimeHandle) -> Any:
        raise NotImplementedError

    def home(self, handle: RuntimeHandle) -> Path:
        raise NotImplementedError

    def scratch(self, handle: RuntimeHandle) -> Path:
        raise NotImplementedError

    def _exec_checked(self, container: Any, cmd: list[str]) -> str:
        result = container.exec_run(cmd)
        output = result.output.decode(errors="replace")
        if result.exit_code != 0:
            raise InvalidRuntime(f"{cmd!r} failed in the container: {output.strip()}")
        return output

    def _mkdirs(self, container: Any, paths: list[str]) -> None:
        self._exec_checked(container, [toolbox.BUSYBOX, "mkdir", "-p", *paths])

    def _check_sandbox_tools(self, container: Any, image: str) -> None:
        """RuntimeUnfit where `image` has no shell (the sandbox brings every other tool)."""
        result = container.exec_run(sandbox_needs.probe_argv())
        output = result.output.decode(errors="replace")
        sandbox_needs.check_probe(f"{self.kind} image {image!r}", result.exit_code, output)

    def _put_source(self, container: Any, request: PrepareRequest) -> None:
        if request.source is None:
            return
        with tempfile.TemporaryDirectory(prefix="polar-src-") as tmp:
            workspace = Path(tmp) / "workspace"
            # dir copy or git clone at ref
            materialise_source(request.source, workspace, forbidden=(self.root,))
            put_dir_contents(container, workspace, request.runtime.workdir)

    async def _upload(self, container: Any, workdir: str, src: Path, dest: str) -> None:
        target = PurePosixPath(dest) if dest.startswith("/") else PurePosixPath(workdir) / dest
        await asyncio.to_thread(self._mkdirs, container, [str(target.parent)])
        await asyncio.to_thread(put_path, container, src, target)

    def _sync_in(self, container: Any, handle: RuntimeHandle, user: str | None = None) -> None:
        """Make the container's home and scratch mirror the worker's (`user`'s, if given)."""
        dirs = [self.home(handle), self.scratch(handle)]
        script = f'{toolbox.BUSYBOX} rm -rf "$@" && {toolbox.BUSYBOX} mkdir -p "$@"'
        self._exec_checked(container, [toolbox.BUSYBOX, "sh", "-c", script, "_", *map(str, dirs)])
        for path in dirs:
            put_dir_contents(container, path, str(path))
        if user is not None:
            give_dirs(container, harness_uid(container, user), list(map(str, dirs)))

    def _sync_out(self, container: Any, handle: RuntimeHandle) -> None:
        """Make the worker's home and scratch mirror the container's. What cannot be brought
        over (a link out of the dir, a name too long, a device or FIFO, a hard link to what
        was left out) is skipped, each named in `polar-skipped.txt` in the dir; an archive
        stream cut short by the engine is fetched again (`SYNC_TRIES`, with backoff)."""
        for path in (self.home(handle), self.scratch(handle)):
            retried(functools.partial(self._sync_dir_out, container, path), str(path))

    def _sync_dir_out(self, container: Any, path: Path) -> None:
        fresh = path.with_name(path.name + ".incoming")
        shutil.rmtree(fresh, ignore_errors=True)
        fresh.mkdir()
        skipped = archive_into(container, str(path), fresh)
        if skipped:
            note = "".join(f"{name}: {why}\n" for name, why in skipped)
            (fresh / SKIPPED_NOTE).write_text(note, errors="replace")
        shutil.rmtree(path)
        fresh.rename(path)

    async def copy_workspace(
        self, handle: RuntimeHandle, dest: Path, junk: Collection[str] = ()
    ) -> list[str]:
        """The workspace, from the engine's archive of it (nothing runs in the container),
        unpacked into the worker's empty `dest` under tarfile's `data` filter; what was left
        out, by relative path. `junk` is not skipped here (the archive holds it all)."""

        def copy() -> list[str]:
            container = self._container(handle)

            def into_dest() -> list[tuple[str, str]]:
                shutil.rmtree(dest)  # what a cut stream left
                dest.mkdir()
                return archive_into(container, handle.workdir, dest)

            skipped = retried(into_dest, handle.workdir)
            drop_alternates(dest)
            return [name for name, _ in skipped]

        return await asyncio.to_thread(copy)

    async def put_workspace(
        self, handle: RuntimeHandle, src: Path, paths: Sequence[str], removed: Sequence[str]
    ) -> None:
        """`removed` taken out with the toolbox's `rm`, `paths` put in by the engine's archive
        (owned as the workspace is): nothing of the image's runs."""

        def put() -> None:
            container = self._container(handle)
            top = PurePosixPath(handle.workdir)
            if removed:
                gone = [str(top / rel) for rel in removed]
                self._exec_checked(container, [toolbox.BUSYBOX, "rm", "-rf", "--", *gone])
            if paths:
                found = self._exec_checked(
                    container, [toolbox.BUSYBOX, "stat", "-c", "%u %g", handle.workdir]
                ).split()
                put_entries(container, src, handle.workdir, paths, (int(found[0]), int(found[1])))

        await asyncio.to_thread(put)

    async def disk_limit(self, handle: RuntimeHandle) -> int:
        """From the container's label (`DISK_LABEL`, set at its creation)."""
        attrs = await asyncio.to_thread(lambda: self._container(handle).attrs)
        return int(attrs["Config"]["Labels"][DISK_LABEL])

    async def read_files(
        self, handle: RuntimeHandle, folder: str, names: Collection[str], limit: int
    ) -> tuple[dict[str, bytes], dict[str, str]]:
        """From the engine's archive of `folder`: nothing runs in the container."""
        container = self._container(handle)
        return await asyncio.to_thread(read_members, container, folder, names, limit)

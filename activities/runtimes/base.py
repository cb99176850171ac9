"""The runtime interface: where a session's harness and evaluator run."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Awaitable, Callable, Collection, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from activities.shell_command import ProcessOutcome
from polar.contracts import PrepareRequest, RuntimeHandle


class InvalidSource(ValueError):
    """The task's source cannot be materialised (missing dir, bad git URL or ref); not
    retryable."""


class SourceUnavailable(RuntimeError):
    """The task's source could not be fetched this time (the remote did not answer, hung up,
    or the clone timed out): retried, maybe on another worker."""


class InvalidRuntime(ValueError):
    """The runtime spec cannot be honoured (missing image, bad upload path); not retryable."""


class RuntimeUnfit(InvalidRuntime):
    """The image or host cannot hold a sandbox: the image has no shell, or the host lacks a
    tool the sandbox itself needs (activities/runtimes/sandboxes/needs.py), each named. Not
    retryable here; an `infra_error` (image) of the session, never the policy's failure."""


class ImageMissing(InvalidRuntime):
    """The task's image is not on this worker's engine (no registry is pulled from): a
    `task_error`, refused once and never retried; the message names the image and how to
    provide it (`image_missing`)."""


IMAGES_DOC = "docs/runtimes.md#images"


def image_missing(engine: str, image: str, how: str) -> ImageMissing:
    """The refusal of a task whose `image` this worker's `engine` does not hold: `how` says
    how to provide it there."""
    return ImageMissing(
        f"{engine} image {image!r} is not on this worker: {how}, on every worker host that "
        f"runs the task ({IMAGES_DOC})"
    )


class PrepareFailed(RuntimeError):
    """A prepare action failed after its own retries; not retried by Temporal."""


class Runtime(Protocol):
    """Prepare an isolated workspace, run commands in it, tear it down."""

    kind: str
    passes_fds: bool
    """Whether `run` takes `pass_fds` (descriptors of the worker's given to the command): the
    runtimes that start the sandbox's process themselves. The started marker then comes by a
    pipe the harness cannot write (activities/runtimes/started_marker.py)."""

    async def prepare(self, request: PrepareRequest) -> RuntimeHandle: ...

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
        """Run `command` in the workspace. `user`: who it runs as (a name of the image's or a
        uid: the harness's `harness_user`, with `home` and `scratch` given to that user);
        None: the runtime's own user. A runtime that cannot honour it raises InvalidRuntime."""
        ...

    def log_paths(self, handle: RuntimeHandle, log_name: str) -> tuple[Path, Path]:
        """Where `run` wrote the stdout and stderr of `log_name`."""
        ...

    def scratch(self, handle: RuntimeHandle) -> Path:
        """A directory outside the workspace, at the same path for commands and the worker.

        What the worker writes there before `run` is seen by the command, and
        what the command writes there is on the worker once `run` returns (the
        Docker runtime copies it in and out; the local one shares the disk).
        """
        ...

    def home(self, handle: RuntimeHandle) -> Path:
        """A fresh per-session HOME for the harness (its config lives there).

        Same contract as `scratch`: the worker writes the harness config there
        before `run`, and finds the harness's native logs there after it.
        """
        ...

    def channel_dir(self, handle: RuntimeHandle) -> Path:
        """The host directory of the session's gateway channel (runtimes/network/channel.py).

        The worker's relay puts its Unix socket (and the in-sandbox forwarder script)
        there; the sandbox sees the same directory at `channel_in_sandbox`.
        """
        ...

    def channel_in_sandbox(self, handle: RuntimeHandle) -> str | None:
        """Where commands inside the sandbox find `channel_dir` (read-only for them); None
        where the runtime is not sealed (its commands reach the gateway directly)."""
        ...

    def open_channel(
        self, handle: RuntimeHandle
    ) -> contextlib.AbstractAsyncContextManager[socket.socket | None]:
        """While open: a socket of the worker's listening at SANDBOX_PORT on the sandbox's
        own loopback, which the session's commands reach at SANDBOX_GATEWAY_URL (the relay
        serves it). None where the runtime cannot listen there from the worker: the
        in-sandbox forwarder (`with_forwarder`) then serves that port."""
        ...

    async def init_empty_workspace(
        self, handle: RuntimeHandle, make_repo: Callable[[Path], str]
    ) -> str | None:
        """If the workspace is empty and on the worker's own disk: `make_repo(workspace)` run
        in the worker (no process), what it wrote given to the sandbox's user, its result.
        None, with nothing done, otherwise (containers; a workspace with files)."""
        ...

    async def copy_workspace(
        self, handle: RuntimeHandle, dest: Path, junk: Collection[str] = ()
    ) -> list[str]:
        """Copy the workspace into the worker's empty dir `dest` without running anything in
        the sandbox (activities/runtimes/workspace.py): dirs, regular files and links
        (never followed); of `.git` only its objects (no alternates) and index; folders
        named in `junk` may be skipped. The relative paths left out (a FIFO, a device, a
        link out of the copy)."""
        ...

    async def read_files(
        self, handle: RuntimeHandle, folder: str, names: Collection[str], limit: int
    ) -> tuple[dict[str, bytes], dict[str, str]]:
        """The regular files among `names` right in the sandbox's dir `folder` (as the sandbox
        sees it), each read up to `limit` bytes without running anything in the sandbox; and
        those there but not regular files (a link, a FIFO, a dir): what each is."""
        ...

    async def disk_limit(self, handle: RuntimeHandle) -> int:
        """The runtime's disk limit in bytes (its RuntimeSpec's `disk`), also the most one
        file may hold there."""
        ...

    async def reap(self, handle: RuntimeHandle) -> None:
        """Kill every process still alive in the runtime (what a command left behind).

        Called after the harness exits (normally, failed or timed out) and after the
        evaluator's tests, before anything they wrote is read. The runtime stays usable.
        """
        ...

    async def teardown(self, handle: RuntimeHandle) -> bool:
        """Remove the session's runtime; whether there was anything to remove."""
        ...

    async def list_sessions(self) -> set[str]:
        """Ids of the sessions with a runtime of this host here (what a sweep checks)."""
        ...


@runtime_checkable
class WorkspaceWriter(Protocol):
    """A runtime whose workspace's git is the worker's own (containers: the image need not
    have git). The baseline is recorded, and the session's changes applied, by the worker's
    git on a copy of the workspace (`copy_workspace`), and what that wrote is put back here
    (activities/evaluators/worker_git.py)."""

    async def put_workspace(
        self, handle: RuntimeHandle, src: Path, paths: Sequence[str], removed: Sequence[str]
    ) -> None:
        """Remove `removed` (relative paths, recursively) from the workspace, then put there
        `paths` (relative, parents first: each a dir, a regular file or a link of the worker's
        dir `src`, one entry each, never recursively), owned by the workspace's owner."""
        ...

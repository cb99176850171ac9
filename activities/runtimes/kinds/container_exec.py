"""A command in a container: its output streamed into the session's logs, its disk use watched.

`LogPump` waits on a `docker exec` in a thread, writing its stdout and stderr to the log
files as they come; `ContainerDiskWatchdog` measures the container's writable layer
(overlay2's upper dir, where the worker's host can see it) against its disk limit.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any, Protocol

import docker

from activities.runtimes.resource_limits import DISK_LABEL, writable_layer_bytes


class ExecPump(Protocol):
    """A started command, waited on in a thread: `done` is set when it ends."""

    done: threading.Event
    error: BaseException | None

    def exit_code(self) -> int | None: ...


class LogPump(threading.Thread):
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


class ContainerDiskWatchdog:
    """Whether a container's writable layer has grown past its disk limit."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self.limit = 0
        self.upper: Path | None = None
        self.checked = False

    def exceeded(self) -> str | None:
        if not self.checked:
            self.checked = True
            upper, limit = _upper_dir_and_limit(self.container)
            self.upper = upper if upper is not None and upper.is_dir() and limit else None
            self.limit = limit or 0
        if self.upper is None:  # a remote engine, another storage driver: the rlimit only
            return None
        used = writable_layer_bytes(self.upper, stop_after=self.limit)
        if used > self.limit:
            return f"disk limit exceeded: wrote more than {self.limit} bytes"
        return None


def _upper_dir_and_limit(container: Any) -> tuple[Path | None, int | None]:
    """The host path of the container's writable layer (overlay2's UpperDir) and its disk
    limit (label), where known."""
    with contextlib.suppress(Exception):
        container.reload()
        attrs = container.attrs
        upper = (attrs.get("GraphDriver") or {}).get("Data", {}).get("UpperDir")
        label = ((attrs.get("Config") or {}).get("Labels") or {}).get(DISK_LABEL)
        return (Path(upper) if upper else None), (int(label) if label else None)
    return None, None

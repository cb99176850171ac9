"""The podman CLI, and the few docker-SDK container methods DockerRuntime's code calls, over it.

`Podman` is the CLI in one mode (as the `polar-runner` user for a rootless root worker);
`PodmanContainer` answers the container calls the shared Docker runtime code makes (status,
kill, start, exec, archives in and out) with `podman` commands; `PodmanExecPump` waits on a
`podman exec` whose output goes straight to the session's log files.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from docker.errors import APIError, NotFound

RUNNER = "polar-runner"
RUNNER_HOME = Path("/var/lib/polar-runner")
CLI_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Podman:
    """The podman CLI in one mode: `argv(...)` is the full command line."""

    mode: str

    @property
    def as_runner(self) -> bool:
        return self.mode == "rootless" and os.geteuid() == 0

    def argv(self, *args: str) -> list[str]:
        if self.as_runner:
            return ["runuser", "-u", RUNNER, "--", "env", f"HOME={RUNNER_HOME}", "podman", *args]
        return ["podman", *args]

    def popen(self, *args: str, **kwargs: Any) -> subprocess.Popen:
        return subprocess.Popen(self.argv(*args), cwd="/", **kwargs)

    def run(
        self,
        *args: str,
        stdin: IO[bytes] | None = None,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
        timeout: float = CLI_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[bytes]:
        proc = subprocess.run(
            self.argv(*args),
            cwd="/",
            stdin=stdin,
            input=input,
            capture_output=True,
            env=env,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            if "no such container" in err or "no container with name" in err:
                raise NotFound(f"podman {args[0]}: {err}")
            raise APIError(f"podman {' '.join(args[:2])} failed ({proc.returncode}): {err}")
        return proc

    def image_id(self, image: str) -> str | None:
        proc = self.run("image", "inspect", "--format", "{{.Id}}", image, check=False)
        if proc.returncode != 0:
            return None
        return proc.stdout.decode().strip() or None


class PodmanExecPump(threading.Thread):
    """Wait for a `podman exec` (its output goes straight to the log files)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        super().__init__(daemon=True, name=f"polar-podman-exec-{proc.pid}")
        self.proc = proc
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.proc.wait()
        finally:
            self.done.set()

    def exit_code(self) -> int | None:
        return self.proc.returncode


@dataclass
class ExecResult:
    exit_code: int
    output: bytes


class PodmanContainer:
    """The few docker-SDK container methods DockerRuntime's shared code calls, via the CLI."""

    def __init__(self, podman: Podman, name: str) -> None:
        self.podman, self.name = podman, name

    @property
    def id(self) -> str:
        return self.name

    @property
    def status(self) -> str:
        proc = self.podman.run(
            "container", "inspect", "--format", "{{.State.Status}}", self.name, check=False
        )
        if proc.returncode != 0:
            raise NotFound(f"podman container {self.name} not found")
        return proc.stdout.decode().strip()

    @property
    def attrs(self) -> dict[str, Any]:
        proc = self.podman.run("container", "inspect", self.name, check=False)
        if proc.returncode != 0:
            raise NotFound(f"podman container {self.name} not found")
        data = json.loads(proc.stdout or b"[]")
        return data[0] if data else {}

    def reload(self) -> None:
        """Attributes are read fresh on every access."""

    def kill(self, signal: str = "SIGKILL") -> None:
        self.podman.run("kill", "--signal", signal, self.name)

    def wait(self, timeout: float = 60) -> None:
        self.podman.run("wait", self.name, check=False, timeout=timeout)

    def start(self) -> None:
        self.podman.run("start", self.name)

    def exec_run(self, cmd: list[str], user: str | None = None) -> ExecResult:
        as_user = ("--user", user) if user is not None else ()
        proc = subprocess.run(
            self.podman.argv("exec", *as_user, self.name, *cmd),
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=CLI_TIMEOUT_S,
        )
        return ExecResult(proc.returncode, proc.stdout)

    def put_archive(self, path: str, data: IO[bytes]) -> bool:
        """Extract the tar `data` into the existing dir `path` (`podman cp - name:path`)."""
        start = data.tell()
        first_block = data.read(512)
        data.seek(start)
        if not first_block.strip(b"\0"):
            return True  # an empty tar (an empty dir's contents), which `podman cp` refuses
        if isinstance(data, io.BytesIO):
            self.podman.run("cp", "-", f"{self.name}:{path}", input=data.getvalue())
        else:
            # podman reads the file's descriptor, not the buffered object: a seek back within
            # what `read` buffered moves only the buffer, so the descriptor is put there too
            # (it was left past the first block: podman saw no tar, for any file over 64 MiB)
            os.lseek(data.fileno(), start, os.SEEK_SET)
            self.podman.run("cp", "-", f"{self.name}:{path}", stdin=data)
        return True

    def get_archive(self, path: str) -> tuple[list[bytes], dict]:
        """A tar of `path` (its top dir included), like the SDK's (chunks, stat)."""
        proc = self.podman.run("cp", f"{self.name}:{path}", "-")
        return [proc.stdout], {}

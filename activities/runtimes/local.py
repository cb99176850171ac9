"""The `local` runtime: one isolated work dir per session on the worker's host.

Layout under `{data_dir}/runtimes/{session_id}/`: `workspace/` (the task's
source), `home/` (a fresh HOME for the harness), `logs/`. Zero setup; no
isolation beyond the file system, so use it for trusted harnesses and dev.
Later stages of a session must run on the same host (the embedded stack runs
one host); the Docker runtime lifts that.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from activities.process import ProcessOutcome, run_shell
from activities.runtimes.actions import run_prepare_actions
from activities.runtimes.base import InvalidRuntime, InvalidSource
from polar.models import DirSource, GitSource, PrepareRequest, RuntimeHandle, Source

BASE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE")


class LocalRuntime:
    kind = "local"

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _session_dir(self, session_id: str) -> Path:
        return self.root / session_id

    def home(self, handle: RuntimeHandle) -> Path:
        return self._session_dir(handle.session_id) / "home"

    def scratch(self, handle: RuntimeHandle) -> Path:
        path = self._session_dir(handle.session_id) / "scratch"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def log_paths(self, handle: RuntimeHandle, log_name: str) -> tuple[Path, Path]:
        logs = self._session_dir(handle.session_id) / "logs"
        return logs / f"{log_name}.stdout", logs / f"{log_name}.stderr"

    async def prepare(self, request: PrepareRequest) -> RuntimeHandle:
        base = self._session_dir(request.session_id)
        if base.exists():  # a retried prepare starts clean
            await asyncio.to_thread(shutil.rmtree, base)
        workspace = base / "workspace"
        (base / "home").mkdir(parents=True)
        (base / "logs").mkdir()
        await asyncio.to_thread(materialise_source, request.source, workspace)
        handle = RuntimeHandle(
            kind=self.kind,
            session_id=request.session_id,
            workdir=str(workspace),
            host=socket.gethostname(),
        )
        await run_prepare_actions(self, handle, request.runtime.prepare, self._uploader(workspace))
        return handle

    def _uploader(self, workspace: Path) -> Callable[[Path, str], Awaitable[None]]:
        async def upload(src: Path, dest: str) -> None:
            target = (workspace / dest).resolve()
            if not target.is_relative_to(workspace.resolve()):
                raise InvalidRuntime(f"local uploads go into the workspace, not to {dest!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                await asyncio.to_thread(shutil.copytree, src, target, symlinks=True,
                                        dirs_exist_ok=True)  # fmt: skip
            else:
                await asyncio.to_thread(shutil.copy2, src, target)

        return upload

    async def run(
        self,
        handle: RuntimeHandle,
        command: str,
        *,
        env: dict[str, str],
        log_name: str,
        timeout_s: float,
        on_tick: Callable[[float], Awaitable[None] | None] | None = None,
    ) -> ProcessOutcome:
        stdout, stderr = self.log_paths(handle, log_name)
        full_env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ}
        # `python` in a local session is the worker's interpreter (its venv has the SDKs)
        full_env["PATH"] = f"{Path(sys.executable).parent}:{full_env.get('PATH', '/usr/bin:/bin')}"
        full_env["HOME"] = str(self.home(handle))
        full_env.update(env)
        return await run_shell(
            command,
            cwd=Path(handle.workdir),
            env=full_env,
            stdout=stdout,
            stderr=stderr,
            timeout_s=timeout_s,
            on_tick=on_tick,
        )

    async def teardown(self, handle: RuntimeHandle) -> None:
        base = self._session_dir(handle.session_id)
        if base.exists():
            await asyncio.to_thread(shutil.rmtree, base, True)


def materialise_source(source: Source | None, workspace: Path) -> None:
    """Fill `workspace` from a directory copy or a git clone (or leave it empty)."""
    if source is None:
        workspace.mkdir(parents=True)
    elif isinstance(source, DirSource):
        src = Path(source.path)
        if not src.is_dir():
            raise InvalidSource(f"source directory {src} does not exist")
        shutil.copytree(src, workspace, symlinks=True)
    elif isinstance(source, GitSource):
        _git(["clone", "--quiet", source.url, str(workspace)], Path.cwd())
        if source.ref:
            _git(["checkout", "--quiet", source.ref], workspace)


def _git(args: list[str], cwd: Path) -> None:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise InvalidSource(f"git {' '.join(args)} failed: {proc.stderr.strip()}")

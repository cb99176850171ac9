"""DevStack: the dev stack's services run as background processes (pid files, logs, start,
stop, kill, status) under `{data_dir}/run/`."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from app.devstack.services import (
    Service,
    StackError,
    console_service,
    default_dockerd_pids,
    docker_engine_answers,
    docker_service,
    gateway_service,
    seaweedfs_service,
    temporal_service,
    vllm_service,
    worker_service,
)
from polar.assets import AssetMissing, asset_dir
from polar.credentials import with_dev_secrets
from polar.dev_console import forget_console_url, record_console_url
from polar.processes import dying_with_parent
from polar.settings import Settings


class DevStack:
    """Start, stop and inspect the embedded stack described by `settings`."""

    def __init__(
        self,
        settings: Settings,
        *,
        with_model: bool = True,
        workers: int = 1,
        die_with_parent: bool = False,
        with_docker: bool | None = None,
    ) -> None:
        """`die_with_parent`: parts die with this process (tests), instead of outliving it.

        `with_docker`: `up` ensures a Docker engine and the local images (default:
        when `dockerd` is installed).
        """
        # secrets the settings leave unset: generated once per data dir (polar.credentials)
        self.settings = settings = with_dev_secrets(settings, create=True)
        self.with_docker = (
            shutil.which("dockerd") is not None if with_docker is None else with_docker
        )
        self.with_model = with_model
        self.workers = workers
        self.die_with_parent = die_with_parent
        self.run_dir = settings.data_dir.resolve() / "run"

    # ------------------------------------------------------------------ parts
    def docker(self) -> Service:
        """`dockerd` on the system default socket and data root, or a private engine where
        DOCKER_HOST names another unix socket (docker_service)."""
        return docker_service(self.settings, self.run_dir)

    def ensure_docker(self, log: Callable[[str], None] = print) -> bool:
        """Start `dockerd` unless an engine answers; True when this call started it."""
        if docker_engine_answers():
            if self.pid("docker") is None:
                log("docker: using the engine that already answers")
            return False
        host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        if host == "unix:///var/run/docker.sock" and (running := default_dockerd_pids()):
            raise StackError(
                f"a dockerd (pid {running[0]}) already runs on the default socket but does not "
                "answer (busy, or its socket was removed): wait for it or restart it; a second "
                "one started over it would take its socket"
            )
        self.start(self.docker(), log)
        return True

    def build_images(self, log: Callable[[str], None] = print) -> None:
        """Build the local images (infra/images/build.py, from a checkout or the installed
        package's data files: polar.assets; a no-op when up to date)."""
        try:
            script = asset_dir("images") / "build.py"
        except AssetMissing as exc:
            raise StackError(f"cannot build the local images: {exc}") from exc
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise StackError(f"image build failed:\n{(proc.stdout + proc.stderr)[-2000:]}")
        for line in proc.stdout.splitlines():
            log(f"images: {line}")

    def temporal(self) -> Service:
        return temporal_service(self.settings)

    def seaweedfs(self) -> Service:
        return seaweedfs_service(self.settings)

    def vllm(self) -> Service:
        return vllm_service(self.settings)

    def gateway(self) -> Service:
        return gateway_service(self.settings, self.env())

    def console(self) -> Service:
        return console_service(self.settings, self.env())

    def worker(self, index: int = 0) -> Service:
        return worker_service(self.run_dir, self.env(), index)

    def services(self) -> list[Service]:
        parts = [self.temporal(), self.seaweedfs()]
        if self.with_model:
            parts.append(self.vllm())
        parts.append(self.gateway())
        parts.append(self.console())
        parts += [self.worker(i) for i in range(self.workers)]
        return parts

    def env(self) -> dict[str, str]:
        """The POLAR_* environment that makes child processes use these settings."""
        return self.settings.as_env()

    # ------------------------------------------------------------------ process control
    def _pidfile(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def log_path(self, name: str) -> Path:
        return self.run_dir / f"{name}.log"

    def pid(self, name: str) -> int | None:
        path = self._pidfile(name)
        if not path.exists():
            return None
        pid = int(path.read_text().strip() or 0)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it if it is our own dead child
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            return None
        return None if state == "Z" else pid

    def _private_state(self) -> None:
        """The data dir traversable only (0711: the local runtime's sessions live below it),
        its state (logs, Temporal's database, SeaweedFS's data, secrets) the stack's alone,
        also where an older stack made it readable."""
        data = self.settings.data_dir.resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if data.stat().st_uid == os.geteuid():
            data.chmod(data.stat().st_mode & 0o700 | 0o711)
        self.run_dir.chmod(0o700)
        for name in ("temporal.db", "temporal.db-wal", "temporal.db-shm", "seaweedfs"):
            path = data / name
            if path.exists() and not path.is_symlink():
                path.chmod(0o700 if path.is_dir() else 0o600)

    def start(self, service: Service, log: Callable[[str], None] = print) -> None:
        """Start one part unless it already runs healthy; wait until it is ready."""
        self._private_state()
        if self.pid(service.name) and service.ready():
            log(f"{service.name}: already running (pid {self.pid(service.name)})")
            return
        self.stop(service.name, quiet=True)
        fd = os.open(self.log_path(service.name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)
        logfile = os.fdopen(fd, "ab")  # handed to the child
        proc = subprocess.Popen(
            dying_with_parent(service.argv) if self.die_with_parent else service.argv,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=os.environ | service.env,
            cwd=service.cwd,
            # what the stack writes (Temporal's database, SeaweedFS's volumes) is its own
            # (0600/0700): a local session's user reads none of it; dockerd sets its own modes
            umask=-1 if service.name == "docker" else 0o077,
            start_new_session=True,
        )
        self._pidfile(service.name).write_text(str(proc.pid))
        deadline = time.monotonic() + service.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = self.log_path(service.name).read_text(errors="replace")[-2000:]
                raise StackError(f"{service.name} exited with {proc.returncode}:\n{tail}")
            if service.ready():
                log(f"{service.name}: started (pid {proc.pid}), log {self.log_path(service.name)}")
                if service.name == "console":  # submissions of this data dir link to it
                    record_console_url(self.settings.data_dir, self.settings.console_base_url)
                return
            time.sleep(0.5)
        raise StackError(
            f"{service.name} not ready after {service.start_timeout_s:.0f}s; "
            f"see {self.log_path(service.name)}"
        )

    def kill(self, name: str, timeout_s: float = 30.0) -> int:
        """SIGKILL one part's process, as a crash would (what it started dies with it), and
        wait until it is gone, so that a `start` right after starts a new one instead of
        finding the dying one with its ready file; its pid."""
        pid = self.pid(name)
        if pid is None:
            raise StackError(f"{name} is not running")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout_s
        while self.pid(name) is not None:  # reaps it once it is a zombie of ours
            if time.monotonic() > deadline:
                raise StackError(f"{name} (pid {pid}) still alive {timeout_s:.0f}s after SIGKILL")
            time.sleep(0.05)
        return pid

    def stop(
        self,
        name: str,
        quiet: bool = False,
        log: Callable[[str], None] = print,
        grace_s: float = 15.0,
    ) -> None:
        """Stop one part (SIGTERM to its process group, SIGKILL after `grace_s`; 0: SIGKILL at
        once, for a throwaway stack whose data nobody keeps)."""
        pid = self.pid(name)
        ready_file = self.run_dir / f"{name}.ready"
        ready_file.unlink(missing_ok=True)
        if name == "console":
            forget_console_url(self.settings.data_dir)
        if pid is None:
            self._pidfile(name).unlink(missing_ok=True)
            if not quiet:
                log(f"{name}: not running")
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
        deadline = time.monotonic() + max(grace_s, 1.0)  # a killed one still has to go
        while time.monotonic() < deadline and self.pid(name):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.2)
        if self.pid(name):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        self._pidfile(name).unlink(missing_ok=True)
        if not quiet:
            log(f"{name}: stopped")

    def up(self, log: Callable[[str], None] = print) -> None:
        if self.with_docker:
            self.ensure_docker(log)
            self.build_images(log)
        for service in self.services():
            self.start(service, log)
            if service.name == "seaweedfs":
                from polar.storage import Storage

                Storage(self.settings).ensure_bucket()

    def down(self, log: Callable[[str], None] = print) -> None:
        for service in reversed(self.services_names()):
            self.stop(service, log=log)

    def services_names(self) -> list[str]:
        names = ["temporal", "seaweedfs", "vllm", "gateway", "console"]
        names += ["worker" if i == 0 else f"worker-{i}" for i in range(max(self.workers, 1))]
        return ["docker", *names] if self.with_docker else names

    def status(self) -> dict[str, str]:
        out = {}
        by_name = {s.name: s for s in self._status_services()}
        for name in self.services_names():
            pid = self.pid(name)
            if pid is None:
                external = name == "docker" and docker_engine_answers()
                out[name] = "external (an engine already answers)" if external else "stopped"
            else:
                service = by_name.get(name)
                healthy = service.ready() if service else True
                out[name] = f"running (pid {pid})" + ("" if healthy else ", not ready")
        return out

    def _status_services(self) -> list[Service]:
        parts = [self.temporal(), self.seaweedfs(), self.gateway(), self.console()]
        if self.with_docker:
            parts.append(Service("docker", [], docker_engine_answers))
        if self.settings.model_dir is not None:
            parts.append(self.vllm())
        parts += [self.worker(i) for i in range(self.workers)]
        return parts

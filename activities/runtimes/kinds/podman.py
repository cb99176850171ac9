"""The `podman` runtime: the Docker runtime's sessions, daemonless and (where it can) rootless.

For clusters that forbid a Docker daemon (the paper uses rootless Apptainer
there; Debian ships `podman`). Everything a session sees is the Docker
runtime's (activities/runtimes/kinds/docker.py, which this subclasses): one
container per session from the task's image, its workspace (the spec's `workdir`,
default `/workspace`) filled by copying,
no network (the session's gateway channel dir is the only mount; a session with sidecars
shares a namespace with them that has only a loopback: podman_sidecars.py), default
CPU, memory, pids and disk limits, a sleep until the wall-clock deadline under
an init as the main process, `reap` by killing and restarting the container,
`home/` and `scratch/` synced at the same paths, teardown by name. Only the transport differs: the
`podman` CLI (no daemon, no socket) instead of the docker SDK, through a small
adapter with the few container methods the shared code calls
(activities/runtimes/kinds/podman_cli.py).

Modes (`POLAR_PODMAN_MODE`, default `auto`):

- `rootless`: as root, podman runs as the unprivileged `polar-runner` user
  (created idempotently, with subuid/subgid ranges and its own storage under
  its home, fuse-overlayfs); a non-root worker runs podman as itself.
  On a cgroup v1 host rootless podman cannot enforce CPU, memory or pids
  limits (podman: "Resource limits are not supported and ignored on cgroups
  V1 rootless systems"); the session still runs, without them.
- `root`: podman as root (still daemonless); limits enforced on v1 and v2.
- `auto`: rootless where user namespaces work and the limits can be enforced
  (cgroup v2), else root when the worker is root. `PodmanRuntime.mode_reason`
  says why.

Images come from a registry-less store: `load_from_docker` copies an image
from the local Docker engine (`docker save | podman load`, skipped when the
image id already matches), e.g. `python -m activities.runtimes.kinds.podman load
polar/runtime:py311`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import pwd
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from docker.errors import APIError

from activities.runtimes import toolbox
from activities.runtimes.base import InvalidRuntime, image_missing
from activities.runtimes.gpu_devices import podman_device_args
from activities.runtimes.kinds.container_exec import ExecPump
from activities.runtimes.kinds.docker import (
    DEADLINE_ENV,
    DEPLOYMENT_LABEL,
    HOST_LABEL,
    LABEL,
    MAIN_COMMAND,
    DockerRuntime,
)
from activities.runtimes.kinds.docker_sidecars import sidecar_name
from activities.runtimes.kinds.podman_cli import (
    CLI_TIMEOUT_S,
    RUNNER,
    RUNNER_HOME,
    Podman,
    PodmanContainer,
    PodmanExecPump,
)
from activities.runtimes.kinds.podman_sidecars import network_args, remove_args, start_sidecars
from activities.runtimes.network.channel_paths import SANDBOX_DIR
from activities.runtimes.resource_limits import DISK_LABEL, ContainerLimits
from activities.runtimes.workspace import session_dirs
from polar.tasks.spec import RuntimeSpec

SUBID_RANGE = (200000, 65536)  # first id, count
STORAGE_CONF = """[storage]
driver = "overlay"
[storage.options.overlay]
mount_program = "/usr/bin/fuse-overlayfs"
"""
OWN_ENV = {
    "HOME",
    "PATH",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
}


# ---------------------------------------------------------------------- host checks and modes
def user_namespaces_work() -> tuple[bool, str]:
    """Whether an unprivileged user namespace can be made here (`unshare -U true`)."""
    if shutil.which("unshare") is None:
        return False, "unshare not found"
    proc = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True)
    if proc.returncode != 0:
        return False, f"`unshare -U true` failed: {proc.stderr.strip()}"
    knob = Path("/proc/sys/kernel/unprivileged_userns_clone")
    if knob.exists() and knob.read_text().strip() == "0":
        return False, "kernel.unprivileged_userns_clone=0"
    return True, "user namespaces work"


def cgroup_v2() -> bool:
    return Path("/sys/fs/cgroup/cgroup.controllers").exists()


@functools.cache
def resolve_mode(requested: str | None = None) -> tuple[str, str]:
    """(`rootless` | `root`, why) for the requested mode (`auto` when None)."""
    requested = requested or os.environ.get("POLAR_PODMAN_MODE") or "auto"
    if requested not in ("auto", "rootless", "root"):
        raise InvalidRuntime(f"POLAR_PODMAN_MODE must be auto, rootless or root: {requested!r}")
    is_root = os.geteuid() == 0
    if requested == "root":
        if not is_root:
            raise InvalidRuntime("podman mode 'root' needs a root worker")
        return "root", "requested"
    if requested == "rootless":
        return "rootless", "requested"
    ok, why = user_namespaces_work()
    if not is_root:
        return "rootless", "the worker is not root"
    if not ok:
        return "root", f"no rootless podman: {why}"
    supported, why = rootless_support()  # also as polar-runner: /dev/fuse, cgroup v2
    if not supported:
        return "root", f"no rootless podman: {why}"
    return "rootless", why


def ensure_runner() -> None:
    """Create (idempotently) the unprivileged user rootless podman runs as, run as root."""
    try:
        pwd.getpwnam(RUNNER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--create-home",
                "--home-dir",
                str(RUNNER_HOME),
                "--shell",
                "/usr/sbin/nologin",
                RUNNER,
            ],
            check=True,
            capture_output=True,
        )
    first, count = SUBID_RANGE
    for table, flag in (("/etc/subuid", "--add-subuids"), ("/etc/subgid", "--add-subgids")):
        lines = Path(table).read_text().splitlines() if Path(table).exists() else []
        if not any(line.startswith(f"{RUNNER}:") for line in lines):
            subprocess.run(
                ["usermod", flag, f"{first}-{first + count - 1}", RUNNER],
                check=True,
                capture_output=True,
            )
    conf = RUNNER_HOME / ".config" / "containers" / "storage.conf"
    if not conf.exists() and Path("/usr/bin/fuse-overlayfs").exists():
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(STORAGE_CONF)
        entry = pwd.getpwnam(RUNNER)
        for path in (conf.parent.parent, conf.parent, conf):
            os.chown(path, entry.pw_uid, entry.pw_gid)


def load_from_docker(image: str, mode: str | None = None) -> bool:
    """Copy `image` from the local Docker engine into podman's store; False when up to date."""
    import docker

    podman = Podman(resolve_mode(mode)[0])
    if podman.as_runner:
        ensure_runner()
    image_id = docker.from_env(timeout=600).images.get(image).id
    if not image_id:
        raise RuntimeError(f"the Docker engine gave no id for image {image!r}")
    want = image_id.removeprefix("sha256:")
    if podman.image_id(image) == want:
        return False
    with tempfile.TemporaryFile() as tar:
        subprocess.run(["docker", "save", image], stdout=tar, check=True, timeout=CLI_TIMEOUT_S)
        tar.seek(0)
        podman.run("load", "--quiet", stdin=tar)
    if podman.image_id(image) != want:
        raise InvalidRuntime(f"podman load of {image} did not give image {want[:12]}")
    return True


# ---------------------------------------------------------------------- the runtime
class PodmanRuntime(DockerRuntime):
    kind = "podman"

    def __init__(
        self,
        root: Path,
        mode: str | None = None,
        *,
        namespace: str | None = None,
        host_id: str | None = None,
        deployment: str | None = None,
    ) -> None:
        super().__init__(root, namespace=namespace, host_id=host_id, deployment=deployment)
        self.mode, self.mode_reason = resolve_mode(mode)
        self.podman = Podman(self.mode)
        self._runner_ready = False

    @property
    def client(self) -> Any:  # the docker SDK is never used here
        raise AssertionError("the podman runtime has no docker client")

    def _ready(self) -> None:
        if self.podman.as_runner and not self._runner_ready:
            ensure_runner()
            self._runner_ready = True

    def _create(self, session_id: str, spec: RuntimeSpec) -> PodmanContainer:
        self._ready()
        if self.podman.image_id(spec.image) is None:
            raise image_missing(
                "podman",
                spec.image,
                f"load it into the {self.mode} store from the local docker engine (`python -m "
                f"activities.runtimes.kinds.podman load {spec.image}`)",
            )
        name = self.container_name(session_id)
        limits = ContainerLimits.of(spec)
        channel = self._session_dir(session_id) / "channel"
        deadline = int(time.time() + max(1.0, spec.wall_clock_s))
        nofile_soft, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        common = [  # the session's container's arguments that its sidecars' share
            *(
                arg
                for key, value in self.labels(session_id).items()
                for arg in ("--label", f"{key}={value}")
            ),
            "--init",
            "--security-opt",
            "no-new-privileges",
            # podman's default rlimits are above what a confined root may set: keep the
            # worker's open-files limit (and below, cap processes like the pids limit does)
            "--ulimit",
            f"nofile={nofile_soft}:{nofile_hard}",
        ]
        sleep = ["--env", f"{DEADLINE_ENV}={deadline}", *toolbox.volume_args(self.root)]
        network = ["--network", "none"]
        if spec.sidecars:  # in a namespace of their own with it, its loopback only
            hosts = self._session_dir(session_id) / "hosts"
            holder = [*sleep, spec.image, *MAIN_COMMAND]
            start_sidecars(self.podman, name, common, holder, spec.sidecars, hosts, spec.depends_on)
            network = network_args(name, hosts)
        args = [
            "run",
            "--detach",
            "--name",
            name,
            *common,
            "--label",
            f"{DISK_LABEL}={limits.disk_bytes}",
            *sleep,
            *network,
            "--volume",
            f"{channel}:{SANDBOX_DIR}:ro",
            "--workdir",
            "/",
            "--pids-limit",
            str(limits.pids),
            "--ulimit",
            f"nproc={limits.pids}:{limits.pids}",
            "--ulimit",
            f"fsize={limits.disk_bytes}:{limits.disk_bytes}",
            "--cpus",
            str(limits.cpus),
            "--memory",
            str(limits.memory_bytes),
            "--memory-swap",
            str(limits.memory_bytes),
            *podman_device_args(spec.gpus),  # CDI names; none unless it asks for GPUs
            spec.image,
            *MAIN_COMMAND,
        ]
        proc = self.podman.run(*args, check=False)
        if proc.returncode != 0:
            with contextlib.suppress(Exception):  # its sidecars too, where it has any
                self.podman.run(*remove_args(name), check=False)
            err = proc.stderr.decode(errors="replace").strip()
            raise APIError(f"podman run failed ({proc.returncode}): {err}")
        return PodmanContainer(self.podman, name)

    async def _remove_container(self, session_id: str) -> bool:
        name = self.container_name(session_id)
        # its sidecars' too, with the holder of their namespace (activities/runtimes/kinds/
        # podman_sidecars.py): a reaper's teardown finds them by name, whatever the spec
        proc = await asyncio.to_thread(self.podman.run, *remove_args(name))
        return bool(proc.stdout.strip())  # `rm --ignore` names what it removed

    async def list_sessions(self) -> set[str]:
        """Session ids with a container of this deployment and host, or a session dir here."""
        self._ready()
        proc = await asyncio.to_thread(
            self.podman.run,
            "ps",
            "--all",
            "--format",
            f'{{{{index .Labels "{LABEL}"}}}}',
            "--filter",
            f"label={DEPLOYMENT_LABEL}={self.deployment}",
            "--filter",
            f"label={HOST_LABEL}={self.host_id}",
        )
        found = set(proc.stdout.decode().split())
        return found | await asyncio.to_thread(session_dirs, self.root)

    def _container(self, handle: Any) -> PodmanContainer:
        return PodmanContainer(self.podman, self.container_name(handle.session_id))

    def _sidecar_container(self, handle: Any, name: str) -> PodmanContainer:
        return PodmanContainer(
            self.podman, sidecar_name(self.container_name(handle.session_id), name)
        )

    def _start_exec(
        self,
        container: Any,
        argv: list[str],
        env: dict[str, str],
        workdir: str,
        stdout: Path,
        stderr: Path,
        user: str | None = None,
    ) -> ExecPump:
        # values travel in podman's own environment (`--env NAME`), not on its command line
        # (where `ps` shows them), except the few podman itself reads
        inline = {k: v for k, v in env.items() if k in OWN_ENV or k.startswith("XDG_")}
        names = [arg for key in env if key not in inline for arg in ("--env", key)]
        names += [arg for key, value in inline.items() for arg in ("--env", f"{key}={value}")]
        proc_env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
        proc_env |= {k: v for k, v in env.items() if k not in inline}
        with open(stdout, "ab") as out, open(stderr, "ab") as err:
            proc = self.podman.popen(
                "exec",
                *names,
                "--workdir",
                workdir,
                *(("--user", user) if user is not None else ()),
                container.name,
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=proc_env,
            )
        pump = PodmanExecPump(proc)
        pump.start()
        return pump


def rootless_support() -> tuple[bool, str]:
    """(whether rootless podman can run sessions with their limits here, why), checked as the
    user it runs as (`polar-runner` for a root worker): user namespaces, `/dev/fuse` opened
    read-write where fuse-overlayfs is its storage, and cgroup v2 (v1 ignores the limits)."""
    prefix: list[str] = []
    who = "the worker's user"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(RUNNER)
        except KeyError:
            return False, f"no {RUNNER} user (python -m activities.runtimes.kinds.podman setup)"
        prefix, who = ["runuser", "-u", RUNNER, "--"], RUNNER
    userns = subprocess.run(
        [*prefix, "unshare", "-U", "true"], capture_output=True, text=True, cwd="/"
    )
    if userns.returncode != 0:
        return False, f"user namespaces do not work for {who}: {userns.stderr.strip()}"
    if Path("/usr/bin/fuse-overlayfs").exists():
        fuse = subprocess.run(
            [*prefix, "sh", "-c", ": <> /dev/fuse"], capture_output=True, text=True, cwd="/"
        )
        if fuse.returncode != 0:
            return False, f"{who} cannot open /dev/fuse read-write: {fuse.stderr.strip()}"
    if not cgroup_v2():
        return False, "cgroup v1 host: rootless podman ignores the CPU, memory and pids limits"
    return True, f"user namespaces and /dev/fuse work for {who}, cgroup v2"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["setup"]:
        mode, why = resolve_mode()
        if os.geteuid() == 0 and user_namespaces_work()[0]:
            ensure_runner()
        print(f"podman runtime: {mode} mode ({why})")
    elif args[:1] == ["load"] and len(args) >= 2:
        for image in args[1:]:
            fresh = load_from_docker(image)
            print(f"{image}: {'loaded from docker' if fresh else 'up to date'}")
    else:
        sys.exit("usage: python -m activities.runtimes.kinds.podman setup | load IMAGE...")


if __name__ == "__main__":
    main()

"""A podman session's sidecars (`RuntimeSpec.sidecars`: a Harbor task's compose services).

Docker gives a session with sidecars a network of its own whose bridge has no address on the
host (activities/runtimes/kinds/docker_sidecars.py). Podman 4.3's networks (netavark) cannot:
an `--internal` network still gives the host an address on the bridge, its gateway, where the
host's servers on all its addresses (and aardvark-dns) answer; closing it takes host firewall
rules that a crashed worker leaves behind. A podman pod on `--network none` would share a
loopback, but its infra container fails on a confined host (podman's default rlimits are
above what it may set, and `pod create` cannot lower them).

So a session with sidecars shares one network namespace with no interface but its loopback:

* a small container of its own, `{container}.sidecar--net` (the name no sidecar can have), is
  made first on `--network none`, with the session's image, labels, hardening and limits, the
  toolbox's sleep until the session's deadline as its only process. It holds the namespace,
  as a pod's infra container would, so a reap (which kills and restarts the session's
  container) keeps the sidecars reachable;
* each sidecar, then the session's container, joins it (`--network container:{holder}`), so
  every one of them reaches the others at 127.0.0.1, and each sidecar by its name: a hosts
  file the worker writes (`127.0.0.1 localhost NAME...`, IPv4 only), mounted read-only at
  `/etc/hosts` in every one (podman refuses `--add-host` in a joined namespace).

Nothing else is in that namespace: no bridge, no route, no DNS server, no host address, on
rootful and rootless podman alike, so the session reaches nothing but its own sidecars and
its gateway channel, and no other session reaches them. What differs from compose (and from
the docker runtime): services share one loopback, so two of them (or a service and the
session's forwarder, 127.0.0.1:4000) cannot listen on the same port, and a service could
call the session's forwarder as the harness does.

Sidecars carry the session's labels plus `polar.sidecar` (so the host's sweep lists their
session and its teardown removes them), no new privileges, an init, a pids limit, CPU and
memory limits of their own. The session's teardown removes the holder with `--depend`: the
sidecars and the session's container, which depend on it, go with it.

They start in `depends_on` order and the session's container only once they are ready
(activities/runtimes/kinds/sidecar_readiness.py). A healthcheck is given to `podman run`
(`--health-cmd`, as podman 4.3 parses it, and its timings; none: `--no-healthcheck`, the
image's own off), but podman
4.3 runs it on a systemd timer, and a worker without systemd has none (measured, rootful
4.3.1: `run` logs "unable to get systemd connection to start healthchecks", exits 0, and
the status stays `starting`), so the wait runs `podman healthcheck run NAME` once per
interval itself; that keeps podman's state (start period, failing streak, `unhealthy` after
`retries`, the probes' log) as the timer would.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from docker.errors import APIError

from activities.runtimes.base import InvalidRuntime
from activities.runtimes.kinds.docker_sidecars import SIDECAR_LABEL, SIDECAR_PIDS, sidecar_name
from activities.runtimes.kinds.podman_cli import Podman, PodmanContainer
from activities.runtimes.kinds.sidecar_readiness import ServiceState, start_when_ready, state_of
from polar.tasks.runtime_spec import Sidecar, parse_size
from polar.tasks.sidecar_spec import Condition

__all__ = ["holder_name", "network_args", "remove_args", "start_sidecars"]

HOLDER = "-net"
"""The holder's `polar.sidecar` label: no sidecar's name (they start with a letter or digit)."""
HOLDER_PIDS = 16
HOLDER_MEMORY = 64 << 20


def holder_name(container: str) -> str:
    """The container that holds a session's network namespace."""
    return sidecar_name(container, HOLDER)


def network_args(container: str, hosts: Path) -> list[str]:
    """A container's arguments to join the session's namespace, with its hosts file."""
    return ["--network", f"container:{holder_name(container)}", *_hosts(hosts)]


def remove_args(container: str) -> list[str]:
    """`podman rm` arguments that remove the session's container, its sidecars and their
    namespace's holder (theirs with `--depend`), whichever exist."""
    names = [holder_name(container), container]
    return ["rm", "--force", "--ignore", "--volumes", "--time", "0", "--depend", *names]


def _hosts(hosts: Path) -> list[str]:
    return ["--volume", f"{hosts}:/etc/hosts:ro"]


def start_sidecars(
    podman: Podman,
    container: str,
    common: list[str],
    holder: list[str],
    sidecars: list[Sidecar],
    hosts: Path,
    main_depends_on: Mapping[str, Condition],
) -> None:
    """The session's namespace holder made and its sidecars started in it. `common`: the
    arguments every container of the session has (labels, init, hardening, open-files
    limit); `holder`: the holder's own last arguments (its deadline, the toolbox, the
    session's image and its sleep). In order, each ready for the session's container when
    this returns. InvalidRuntime (the task's error) where a sidecar's image is not in this
    podman's store; SidecarNotReady where one is not ready; APIError where podman fails (the
    session's teardown removes what was made)."""
    for sidecar in sidecars:
        if podman.image_id(sidecar.image) is None:
            raise InvalidRuntime(
                f"sidecar {sidecar.name}: image {sidecar.image!r} is not in this host's podman "
                f"store (`python -m activities.runtimes.kinds.podman load {sidecar.image}`)"
            )
    names = " ".join(s.name for s in sidecars)
    # IPv4 only, as compose's names are (a client that tries only the first address would
    # miss a service on 0.0.0.0 at ::1)
    hosts.write_text(f"127.0.0.1\tlocalhost {names}\n::1\tlocalhost\n")
    hosts.chmod(0o644)
    _run(
        podman,
        "holder",
        [
            "run",
            "--detach",
            "--name",
            holder_name(container),
            *common,
            "--label",
            f"{SIDECAR_LABEL}={HOLDER}",
            "--network",
            "none",
            *_hosts(hosts),
            "--read-only",
            *_limits(HOLDER_PIDS, 0.1, HOLDER_MEMORY),
            *holder,
        ],
    )
    engine = _Engine(podman, container, common, hosts)
    start_when_ready(engine, sidecars, main_depends_on)


def health_args(sidecar: Sidecar) -> list[str]:
    """`podman run`'s healthcheck arguments for `sidecar` (none: the image's own off)."""
    check = sidecar.healthcheck
    if check is None:
        return ["--no-healthcheck"]
    return [
        "--health-cmd",
        _health_cmd(check.command),
        "--health-interval",
        _duration(check.interval_s),
        "--health-timeout",
        _duration(check.timeout_s),
        "--health-retries",
        str(check.retries),
        "--health-start-period",
        _duration(check.start_period_s),
    ]


def _health_cmd(command: list[str] | str) -> str:
    """`--health-cmd` as podman 4.3 reads it: a JSON array starting with `CMD` is split on
    blanks as raw text (measured: `["CMD", "python3", "-c", "import os"]` gives the argv
    `["CMD",`, `"python3",`...), but one of two or more words without it is an argv, and
    `["CMD-SHELL", line]` a shell line. A one-word argv goes as a shell line of that word
    quoted (the image's /bin/sh runs it)."""
    if isinstance(command, str):
        return json.dumps(["CMD-SHELL", command])
    if len(command) == 1:
        return json.dumps(["CMD-SHELL", shlex.quote(command[0])])
    return json.dumps(command)


def _duration(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


class _Engine:
    """Podman's side of the readiness wait: `run`, `inspect`, `healthcheck run`, logs."""

    drives_health = True

    def __init__(self, podman: Podman, container: str, common: list[str], hosts: Path):
        self.podman, self.container, self.common, self.hosts = podman, container, common, hosts

    def _name(self, sidecar: Sidecar) -> str:
        return sidecar_name(self.container, sidecar.name)

    def state(self, sidecar: Sidecar) -> ServiceState:
        return state_of(PodmanContainer(self.podman, self._name(sidecar)).attrs)

    def probe(self, sidecar: Sidecar) -> None:
        """One run of its healthcheck (podman records it: status, streak, log)."""
        assert sidecar.healthcheck is not None
        timeout = sidecar.healthcheck.timeout_s + 30
        self.podman.run("healthcheck", "run", self._name(sidecar), check=False, timeout=timeout)

    def logs(self, sidecar: Sidecar) -> str:
        proc = self.podman.run("logs", "--tail", "20", self._name(sidecar), check=False)
        return (proc.stdout + proc.stderr).decode(errors="replace")

    def start(self, sidecar: Sidecar) -> None:
        memory = parse_size(sidecar.memory)
        env = [arg for key in sidecar.env for arg in ("--env", key)]  # values: podman's env
        entrypoint = ["--entrypoint", json.dumps(sidecar.entrypoint)] if sidecar.entrypoint else []
        workdir = ["--workdir", sidecar.workdir] if sidecar.workdir else []
        _run(
            self.podman,
            f"sidecar {sidecar.name}",
            [
                "run",
                "--detach",
                "--name",
                self._name(sidecar),
                *self.common,
                "--label",
                f"{SIDECAR_LABEL}={sidecar.name}",
                *network_args(self.container, self.hosts),
                *_limits(SIDECAR_PIDS, sidecar.cpus, memory),
                *health_args(sidecar),
                *env,
                *entrypoint,
                *workdir,
                sidecar.image,
                *(sidecar.command or []),
            ],
            sidecar.env,
        )


def _limits(pids: int, cpus: float, memory: int) -> list[str]:
    return [
        "--pids-limit",
        str(pids),
        "--ulimit",
        f"nproc={pids}:{pids}",
        "--cpus",
        str(cpus),
        "--memory",
        str(memory),
        "--memory-swap",
        str(memory),
    ]


def _run(podman: Podman, what: str, args: list[str], env: dict[str, str] | None = None) -> None:
    proc_env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")} | (env or {})
    proc = podman.run(*args, env=proc_env, check=False)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise APIError(f"podman run of the session's {what} failed ({proc.returncode}): {err}")

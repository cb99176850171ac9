"""Which runtime kinds this host can run, and what `kind: auto` means here.

`auto` is resolved once per worker process, from what the host offers, in this order:

1. `docker`, where a Docker engine answers (`DOCKER_HOST` or the local socket);
2. `podman`, where podman can run sessions as this worker: a root worker always can (root
   mode or its `polar-runner` user), a worker that is not root only where rootless podman
   works for it (user namespaces, `/dev/fuse`, cgroup v2, subordinate ids);
3. `local`, sealed by its namespace sandbox (root) or bubblewrap (not root); where neither
   seals, the local runtime refuses to run sessions unless the deployment allows unsealed.

Every stage of a session runs on the host that prepared it and asks the same question of the
same process, so all of them get the same kind; the handle a prepare returns names the
concrete kind. The sweep (activities/host_sweep.py) looks only at the kinds this host can
have runtimes of, so a worker that is not root never starts rootless podman just to look.
"""

from __future__ import annotations

import functools
import getpass
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AUTO", "Choice", "podman_usable", "resolve_auto", "sweep_kinds"]

AUTO = "auto"


@dataclass(frozen=True)
class Choice:
    """The kind `auto` stands for on this host, and why."""

    kind: str
    why: str


def docker_reachable(timeout_s: float = 3.0) -> tuple[bool, str]:
    """Whether a Docker engine answers a ping from this worker."""
    try:
        import docker

        client = docker.from_env(timeout=int(max(1, timeout_s)))
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine for us
        return False, f"no Docker engine: {type(exc).__name__}: {str(exc)[:200]}"
    return True, "a Docker engine answers"


def _has_subids(user: str) -> bool:
    try:
        lines = Path("/etc/subuid").read_text().splitlines()
    except OSError:
        return False
    return any(line.split(":", 1)[0] in (user, str(os.geteuid())) for line in lines)


def podman_usable() -> tuple[bool, str]:
    """Whether podman can run sessions as this worker (without starting podman to find out:
    a rootless podman leaves its pause process behind)."""
    if shutil.which("podman") is None:
        return False, "podman is not installed"
    if os.geteuid() == 0:
        return True, "podman as root (root mode or its polar-runner user)"
    from activities.runtimes.kinds.podman import rootless_support

    user = getpass.getuser()
    if not _has_subids(user):
        return False, f"{user} has no subordinate ids (/etc/subuid) for rootless podman"
    ok, why = rootless_support()
    return ok, why


@functools.cache
def resolve_auto() -> Choice:
    """The concrete kind `auto` means for this worker process (probed once)."""
    reasons = []
    ok, why = docker_reachable()
    if ok:
        return Choice("docker", why)
    reasons.append(why)
    ok, why = podman_usable()
    if ok:
        return Choice("podman", why)
    reasons.append(why)
    sealer = "its namespace sandbox" if os.geteuid() == 0 else "bubblewrap (the worker is not root)"
    return Choice("local", f"{'; '.join(reasons)}: local, sealed by {sealer}")


def concrete(kind: str) -> str:
    """`kind`, with `auto` replaced by what it means on this host."""
    return resolve_auto().kind if kind == AUTO else kind


def sweep_kinds() -> tuple[str, ...]:
    """The runtime kinds this host can have runtimes of: every registered kind
    (activities/runtimes: `RUNTIMES`, in its order; a docker that does not answer is
    reported as skipped), podman only where it is usable or this user has used it before
    (its storage exists)."""
    from activities.runtimes import RUNTIMES  # the registry's module imports this one

    def here(kind: str) -> bool:
        if kind != "podman":
            return True
        used = (Path.home() / ".local/share/containers/storage").exists()
        return bool(shutil.which("podman")) and (used or podman_usable()[0])

    return tuple(kind for kind in RUNTIMES if here(kind))

"""A docker session's sidecars (`RuntimeSpec.sidecars`: a Harbor task's compose services).

Where a session has sidecars, its container is not on `--network none` but on a network of
its own, made for it: an internal bridge (no route out of it) whose bridge has no IPv4
address on the host (`inhibit_ipv4`), so nothing on it reaches the host either, and whose
containers have IPv6 off (the engine's default). Only the session's container and its
sidecars are on it; each sidecar answers there by its name (a network alias). So a sidecar is
reachable from its session alone, and its traffic stays in the session's sealed box; the
harness's model calls still go only through the gateway channel.

Sidecars run their task's image with the same hardening as the session's container (no new
privileges, docker-init, a pids limit, CPU and memory limits of their own, no swap beyond
memory), carry the session's labels (so a host's sweep finds them) plus `polar.sidecar`, and
are removed with the session's container, then the network. Only the session's container
runs the harness; a sidecar is never reaped between stages: the grading runtime has its
own, fresh from the image.
"""

from __future__ import annotations

import contextlib
from typing import Any

from docker.errors import APIError, ImageNotFound, NotFound

from activities.runtimes.base import InvalidRuntime
from polar.tasks.runtime_spec import Sidecar, parse_size

__all__ = ["SIDECAR_LABEL", "network_name", "remove_sidecars", "sidecar_name", "start_sidecars"]

SIDECAR_LABEL = "polar.sidecar"
SIDECAR_PIDS = 512
"""A sidecar's process limit."""


def network_name(container: str) -> str:
    """The session's own network, named after its container."""
    return f"{container}-net"


def sidecar_name(container: str, name: str) -> str:
    """A sidecar's container, named after the session's: `.sidecar-`, which no session id
    Polar makes holds, so a sidecar named `eval` is not the session's evaluator runtime
    (`{session}-eval`)."""
    return f"{container}.sidecar-{name}"


def start_sidecars(
    client: Any, container: str, labels: dict[str, str], sidecars: list[Sidecar]
) -> str:
    """The session's network made and its sidecars started on it; the network's name.
    InvalidRuntime (the task's error) where a sidecar's image is not on this engine."""
    for sidecar in sidecars:
        try:
            client.images.get(sidecar.image)
        except ImageNotFound:
            raise InvalidRuntime(
                f"sidecar {sidecar.name}: image {sidecar.image!r} is not on this host's engine "
                "(build or load it here, or map it: docs/harbor.md)"
            ) from None
    name = network_name(container)
    client.networks.create(
        name,
        driver="bridge",
        internal=True,
        labels=labels,
        options={"com.docker.network.bridge.inhibit_ipv4": "true"},
        check_duplicate=True,
    )
    for sidecar in sidecars:
        memory = parse_size(sidecar.memory)
        client.containers.run(
            sidecar.image,
            sidecar.command,
            entrypoint=sidecar.entrypoint,
            name=sidecar_name(container, sidecar.name),
            labels=labels | {SIDECAR_LABEL: sidecar.name},
            environment=sidecar.env,
            working_dir=sidecar.workdir,
            detach=True,
            init=True,
            network=name,
            networking_config={name: client.api.create_endpoint_config(aliases=[sidecar.name])},
            security_opt=["no-new-privileges"],
            pids_limit=SIDECAR_PIDS,
            nano_cpus=int(sidecar.cpus * 1e9),
            mem_limit=memory,
            memswap_limit=memory,
        )
    return name


def remove_sidecars(client: Any, container: str, labels: list[str]) -> bool:
    """The session's sidecars (its `labels`, `key=value`) and network removed; whether there
    was any."""
    found = client.containers.list(all=True, filters={"label": [*labels, SIDECAR_LABEL]})
    for sidecar in found:
        with contextlib.suppress(NotFound):
            sidecar.remove(force=True, v=True)
    removed = bool(found)
    with contextlib.suppress(NotFound):
        network = client.networks.get(network_name(container))
        with contextlib.suppress(APIError):  # a container still attached: removed next
            network.remove()
            removed = True
    return removed

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

They start in `depends_on` order and the session's container only once they are ready
(activities/runtimes/kinds/sidecar_readiness.py): a sidecar's healthcheck is given to the
engine at create (nanoseconds), which runs it and reports it in `State.Health`; a sidecar
without one has its image's own HEALTHCHECK turned off (`NONE`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from docker.errors import APIError, ImageNotFound, NotFound

from activities.runtimes.base import InvalidRuntime
from activities.runtimes.kinds.sidecar_readiness import ServiceState, start_when_ready, state_of
from polar.tasks.runtime_spec import Sidecar, parse_size
from polar.tasks.sidecar_spec import Condition

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
    client: Any,
    container: str,
    labels: dict[str, str],
    sidecars: list[Sidecar],
    main_depends_on: Mapping[str, Condition],
) -> str:
    """The session's network made and its sidecars started on it, in order, and ready for
    the session's container; the network's name. InvalidRuntime (the task's error) where a
    sidecar's image is not on this engine; SidecarNotReady where one is not ready."""
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
    start_when_ready(_Engine(client, container, name, labels), sidecars, main_depends_on)
    return name


def healthcheck_of(sidecar: Sidecar) -> dict[str, Any]:
    """The docker API's healthcheck of `sidecar` (durations in nanoseconds)."""
    check = sidecar.healthcheck
    if check is None:
        return {"test": ["NONE"]}
    return {
        "test": check.test(),
        "interval": int(check.interval_s * 1e9),
        "timeout": int(check.timeout_s * 1e9),
        "retries": check.retries,
        "start_period": int(check.start_period_s * 1e9),
    }


class _Engine:
    """Docker's side of the readiness wait: create and start, `State`, logs."""

    drives_health = False

    def __init__(self, client: Any, container: str, network: str, labels: dict[str, str]):
        self.client, self.container, self.network, self.labels = client, container, network, labels

    def state(self, sidecar: Sidecar) -> ServiceState:
        found = self.client.containers.get(sidecar_name(self.container, sidecar.name))
        return state_of(found.attrs)

    def probe(self, sidecar: Sidecar) -> None:
        """The engine runs the healthcheck itself."""

    def logs(self, sidecar: Sidecar) -> str:
        with contextlib.suppress(NotFound, APIError):
            found = self.client.containers.get(sidecar_name(self.container, sidecar.name))
            return bytes(found.logs(tail=20)).decode(errors="replace")
        return ""

    def start(self, sidecar: Sidecar) -> None:
        client, name = self.client, self.network
        memory = parse_size(sidecar.memory)
        client.containers.run(
            sidecar.image,
            sidecar.command,
            entrypoint=sidecar.entrypoint,
            name=sidecar_name(self.container, sidecar.name),
            labels=self.labels | {SIDECAR_LABEL: sidecar.name},
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
            healthcheck=healthcheck_of(sidecar),
        )


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

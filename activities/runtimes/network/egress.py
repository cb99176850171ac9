"""A session's egress, where its task asks for network and the deployment allows it.

A session has no network of its own (docker/podman `--network none`, the local
runtime's own network namespace). A task whose `runtime.network` is `public` or
`allowlist` still gets none: on a worker with `POLAR_EGRESS=proxy` its harness
(and a Harbor verifier whose network asks for it) gets a worker-side HTTP proxy
(`EgressProxy`) on a second Unix socket in the session's channel dir,
`egress.sock`, which a second in-sandbox forwarder serves at
`http://127.0.0.1:3128` (`EgressDoor.wrap`), named in HTTP_PROXY/HTTPS_PROXY
(and lower-case), with NO_PROXY for loopback (the gateway's channel) and the session's own
services (its compose sidecars, reached on its private network).

The proxy takes `CONNECT host:port` (HTTPS and any TLS: the bytes are spliced, never
read) and absolute-form plain HTTP (`GET http://host/path`: sent on as origin-form,
`Connection: close`, one request per connection). Each attempt is decided by
`EgressPolicy`: `allowlist` only the task's hosts; `public` anything; in both,
the name is resolved on the worker and each address checked: never the worker
host's own (every address of its interfaces and its local routes, read from
the kernel at each attempt: `host_networks`), never one that is not global
unicast nor an IPv6 spelling of one (polar/network_policy.py `not_global`:
IPv4-mapped, -compatible, SIIT, NAT64, 6to4, Teredo), never one in the
deployment's blocked networks (POLAR_EGRESS_BLOCKED_NETWORKS, extra blocks), so
a name that resolves (or rebinds) to 127.0.0.1 is refused; the proxy connects
to the address it checked, never resolving again. POLAR_EGRESS_EXEMPT lists
`address:port` pairs (an internal package mirror, a test's server) that pass
those blocks; a network entry never opens an address of the host's own. A
refused attempt gets `403` with the reason (header `x-polar-egress: refused`).

The socket is bounded as the gateway channel is (`EgressProxy`): connections
counted at the accept, at most POLAR_EGRESS_MAX_CONNECTIONS at once, a request
head within HEAD_TIMEOUT_S; the first connection past the cap ends the session.

Every attempt is logged (`EgressLog`: host, port, resolved address, allowed or
refused and why, bytes each way, duration); the run uploads it as the session's
`egress.jsonl` artifact.

What a connection may reach is egress_policy.py, the proxy egress_proxy.py; this module
opens a session's egress for a command (`open_egress`, `EgressDoor`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from activities.runtimes.base import Runtime
from activities.runtimes.network.channel_paths import with_forwarder
from activities.runtimes.network.egress_policy import EgressPolicy
from activities.runtimes.network.egress_proxy import EGRESS_SOCKET, EgressProxy
from polar.contracts import RuntimeHandle
from polar.settings import WorkerSettings
from polar.tasks.runtime_spec import RuntimeSpec
from polar.tasks.spec import NetworkSpec

EGRESS_PORT = 3128
"""Where the sandbox's egress forwarder listens (its HTTP_PROXY)."""
EGRESS_LOG = "egress.jsonl"


class EgressRefused(Exception):
    """A session's network the worker cannot grant (egress off, an unsealed runtime)."""


def egress_refusal(
    network: NetworkSpec, settings: WorkerSettings, what: str = "runtime"
) -> str | None:
    """Why this worker cannot give a task's `network`, or None (sealed, or egress on)."""
    if network.sealed or settings.egress == "proxy":
        return None
    return (
        f"{what}.network.mode is {network.mode!r}, but this deployment has no egress policy "
        "turned on (POLAR_EGRESS=off): its sessions are sealed, with no network but the "
        "gateway. Run it on workers with POLAR_EGRESS=proxy, or set the task's network to "
        "'none' (Harbor: network_mode = \"no-network\") if it needs none"
    )


def with_local_hosts(handle: RuntimeHandle, spec: RuntimeSpec) -> RuntimeHandle:
    """`handle` naming the session's own services (its sidecars), which its commands reach
    directly: never through the egress proxy."""
    if not spec.sidecars:
        return handle
    return handle.model_copy(update={"local_hosts": [s.name for s in spec.sidecars]})


@dataclass
class EgressDoor:
    """An open egress for one command: how to wrap it, its env, and the proxy's log."""

    proxy: EgressProxy
    channel_in_sandbox: str
    local_hosts: tuple[str, ...] = ()
    """the session's own services (`RuntimeHandle.local_hosts`), reached without the proxy"""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{EGRESS_PORT}"

    @property
    def env(self) -> dict[str, str]:
        no_proxy = ",".join(("127.0.0.1", "localhost", "::1", *self.local_hosts))
        return {
            "HTTP_PROXY": self.url,
            "HTTPS_PROXY": self.url,
            "http_proxy": self.url,
            "https_proxy": self.url,
            "NO_PROXY": no_proxy,
            "no_proxy": no_proxy,
        }

    def wrap(self, command: str) -> str:
        """`command` behind the sandbox's egress forwarder (outermost: it starts first)."""
        return with_forwarder(
            command, self.channel_in_sandbox, port=EGRESS_PORT, socket_name=EGRESS_SOCKET
        )


@contextlib.asynccontextmanager
async def open_egress(
    runtime: Runtime,
    handle: RuntimeHandle,
    network: NetworkSpec,
    settings: WorkerSettings,
    what: str = "runtime",
) -> AsyncIterator[EgressDoor | None]:
    """The egress a command of `handle` gets while the block runs: None when `network` is
    sealed; EgressRefused where this worker cannot give it (egress off, or a runtime with
    no sealed channel, whose commands would reach the network around any policy)."""
    if network.sealed:
        yield None
        return
    refusal = egress_refusal(network, settings, what)
    if refusal is not None:
        raise EgressRefused(refusal)
    channel = runtime.channel_in_sandbox(handle)
    if channel is None:
        raise EgressRefused(
            f"{what}.network.mode is {network.mode!r}, but this {handle.kind} runtime is not "
            "sealed (POLAR_ALLOW_UNSEALED): its commands reach the host's network around any "
            "egress policy, so none is granted"
        )
    policy = EgressPolicy.of(network, settings, tuple(handle.local_hosts))
    async with EgressProxy(
        runtime.channel_dir(handle), policy, settings.egress_max_connections
    ) as proxy:
        yield EgressDoor(proxy, channel, tuple(handle.local_hosts))

"""Three hosts, each a network namespace of its own: stages follow their runtime, a lost host is
survived.

Each host (`ha`, `hb`, `hc`) is a network + UTS namespace made here
(tests/support/netns.py), with its own hostname (so the Temporal identity of
its worker reads `pid@ha`), its own loopback, and one veth pair to the root
namespace as its only way out. Inside it run its own `polar worker`
(`POLAR_HOST_ID`, data dir) and its own Docker engine (socket, data root, exec
root, pidfile; tests/support/hosts.py). The suite's one Temporal dev server and
one SeaweedFS (on loopback) serve all hosts through TCP relays that listen only
on the root-side address of the veths (tests/support/relay.py), and one gateway
is bound there; nothing else is reachable from the hosts.

The first test runs 12 Docker sessions: they spread over the three hosts, each
session's stages run on the host that prepared it, and nothing is left behind.
The second kills the first host seen running a harness mid-task (its worker,
engine, containers and namespace, all SIGKILLed at once): its sessions go on on
another host or end saying "host … lost", and the surviving hosts have no container nor work dir
left. Run in that order (the second one takes a host away).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.settings import Settings
from polar.temporal_client import connect
from tests.support import netns
from tests.support.faults import Node, endless_backend
from tests.support.hosts import (
    Engine,
    at_once,
    check_lost_host_outcome,
    check_stayed_on_their_hosts,
    docker_task,
    harness_workers,
    image_tarball,
    kill_pids,
    placements,
    runtime_dirs,
    stage_hosts,
    start_host,
    wait_for_hosts_polling,
)
from tests.support.netns import NetHost
from tests.support.polling import wait_for
from tests.support.relay import tcp_relays

pytestmark = pytest.mark.slow

HOSTS = ("ha", "hb", "hc")


@dataclass
class Cluster:
    """The test's settings (the suite's Temporal and S3 on loopback) and, per host name, its
    namespace, engine and node."""

    settings: Settings
    source: Path
    net: dict[str, NetHost]
    engines: dict[str, Engine]
    nodes: dict[str, Node]


def host_of(identity: str) -> str:
    """The host of a worker identity `pid@hostname`: each namespace has its own hostname."""
    return identity.rsplit("@", 1)[-1]


def port_of(address: str) -> int:
    """The port of `host:port` or `scheme://host:port`."""
    return int(address.rsplit(":", 1)[1].rstrip("/"))


@pytest.fixture(scope="module")
def cluster(
    devstack: DevStack, docker_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """The three namespace hosts, each with its engine and worker; the suite's Temporal and S3
    relayed onto the root-side address (same ports), and a gateway bound there."""
    reason = netns.unavailable()
    if reason:
        print(f"skipping the namespace multi-host test: {reason}")
        pytest.skip(reason)
    tarball = image_tarball(docker_image, tmp_path_factory.getbasetemp())
    work = tmp_path_factory.mktemp("netns")
    source = work / "src"
    source.mkdir()
    suite = devstack.settings
    with ExitStack() as stop:
        net = stop.enter_context(netns.host_network(list(HOSTS)))
        address = net.service_address
        ports = port_of(suite.temporal_address), port_of(suite.s3_endpoint or "")
        stop.enter_context(tcp_relays([((address, p), ("127.0.0.1", p)) for p in ports]))
        # short paths: a unix socket path has at most 107 characters
        top = Path(tempfile.mkdtemp(prefix="polar-netns-", dir="/tmp"))
        stop.callback(shutil.rmtree, top, ignore_errors=True)
        backend = stop.enter_context(endless_backend(delay_s=0.1))
        shared = suite.model_copy(
            update={
                "task_queue": "polar-netns",
                "upstream_urls": backend.url,
                "gateway_host": address,
            }
        )
        gateway = Node(shared, work / "gateway", "gateway")
        stop.callback(gateway.close)
        gateway.start_gateway()
        # what a host is told: every shared service at the root-side address
        remote = shared.model_copy(
            update={
                "temporal_address": f"{address}:{ports[0]}",
                "s3_endpoint": f"http://{address}:{ports[1]}",
                "gateway_port": gateway.settings.gateway_port,
            }
        )
        engines = {
            name: Engine(name, top / name, enter=host.enter) for name, host in net.hosts.items()
        }
        stop.callback(at_once, [engine.remove for engine in engines.values()])  # side by side
        for engine in engines.values():
            engine.start()  # here, not in a thread: dockerd dies with the thread starting it
        at_once(partial(engine.load, tarball) for engine in engines.values())
        nodes: dict[str, Node] = {}
        for name, host in net.hosts.items():
            engine = engines[name]
            nodes[name] = node = Node(
                remote,
                work / name,
                name,
                host_id=name,
                gateway_port=remote.gateway_port,
                sweep_interval_s=5,
            )
            stop.callback(node.close)
            start_host(node, engine, max_run=2, enter=host.enter)
            # really inside: the worker and the engine live in the host's network namespace
            assert host.holds(node.pid("worker")), name  # type: ignore[arg-type]
            assert host.holds(engine.proc.pid), name  # type: ignore[union-attr]
        yield Cluster(shared, source, net.hosts, engines, nodes)


async def test_sessions_spread_over_namespace_hosts_and_stay_on_theirs(cluster: Cluster) -> None:
    polar = PolarClient(await connect(cluster.settings), cluster.settings)
    await wait_for_hosts_polling(polar, cluster.nodes.values())
    started = time.monotonic()
    run = await polar.submit(docker_task("netns", cluster.source, sessions=12, pause_s=1.0))
    result = await polar.wait(run, timeout_s=900)
    print(f"12 sessions over {len(HOSTS)} namespace hosts: {time.monotonic() - started:.0f}s")
    runs = {s.session_id: await stage_hosts(polar, s.session_id, host_of) for s in result.sessions}

    check_stayed_on_their_hosts(result, runs, set(HOSTS))
    # nothing left behind on any host: no container, no work dir
    for name in HOSTS:
        assert cluster.engines[name].containers() == [], name
        assert runtime_dirs(cluster.nodes[name]) == [], name


async def test_a_killed_namespace_host_is_survived_and_nothing_leaks(cluster: Cluster) -> None:
    polar = PolarClient(await connect(cluster.settings), cluster.settings)
    await wait_for_hosts_polling(polar, cluster.nodes.values())
    run = await polar.submit(docker_task("netns-kill", cluster.source, sessions=12, pause_s=4.0))
    running: list[str] = []  # the hosts seen running a harness; the first one is killed

    async def some_host_runs_harness() -> bool:
        running.extend(host_of(identity) for identity in await harness_workers(polar, run))
        return bool(running)

    # whichever host runs a harness first is lost (under load, placement by load may not
    # hand a given host a session before the others have run all twelve)
    await wait_for(some_host_runs_harness, 300, "a host running a harness", every_s=2)
    lost = running[0]
    survivors = tuple(name for name in HOSTS if name != lost)
    # the host goes at once: worker, engine (containerd, shims, containers) and its namespace
    host = cluster.net[lost]
    kill_pids(cluster.engines[lost].pids() | host.pids())
    host.holder.wait()
    started = time.monotonic()
    result = await polar.wait(run, timeout_s=900)
    print(
        f"after killing {lost}: task done in {time.monotonic() - started:.0f}s; "
        f"sessions per host: {[s.hosts for s in result.sessions]}"
    )
    await wait_for(  # the survivors' sweeps run every 5 s
        lambda: (
            not any(
                cluster.engines[name].containers() or runtime_dirs(cluster.nodes[name])
                for name in survivors
            )
        ),
        60,
        "the survivors' sweeps to leave nothing behind",
        every_s=1,
    )

    assert not host.linked(), host.root_link  # the host is gone: its namespace took its veth
    moved = check_lost_host_outcome(result, lost)
    for session in result.sessions:
        runs = await stage_hosts(polar, session.session_id, host_of)
        placed = placements(runs)
        # every placement's later stages ran on its own host only (none on another one)
        assert all(later <= {where} for where, later in placed), runs
        if session in moved:
            last_host, later = placed[-1]
            assert last_host in survivors, runs
            if session.status == SessionStatus.COMPLETED:  # run, evaluated and torn down there
                assert later == {last_host}, runs
    # nothing leaked on the surviving hosts
    for name in survivors:
        assert cluster.engines[name].containers() == [], name
        assert runtime_dirs(cluster.nodes[name]) == [], name

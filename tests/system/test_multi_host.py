"""Several hosts, one Temporal, one S3, one gateway: a session's stages run where its runtime is.

Each "host" is a worker process with its own `POLAR_HOST_ID`, its own data dir
(work dirs) and its own Docker engine: a `dockerd` started here with its own
socket, data root, exec root and pidfile (`--iptables=false --bridge=none`:
sessions have no network anyway), the session image loaded into it with
`docker save | docker load`. The hosts share the suite's Temporal and S3 and
one gateway, all on loopback of the root network namespace.

This is the regression test of the original bug: before host queues, a
session prepared on host A had its `run_harness` picked up by host B (`404 No
such container`) and its teardown ran on B too, leaking A's container.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.temporal_client import connect
from tests.support import netns
from tests.support.faults import Node, endless_backend
from tests.support.hosts import (
    Engine,
    at_once,
    check_lost_host_outcome,
    check_stayed_on_their_hosts,
    docker_task,
    host_by_pid,
    image_tarball,
    placements,
    runs_harness,
    runtime_dirs,
    stage_hosts,
    start_host,
    wait_for_hosts_polling,
)
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def engines(docker_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Engine]]:
    """Two Docker engines of their own, the session image loaded into each."""
    tarball = image_tarball(docker_image, tmp_path_factory.getbasetemp())
    # short paths: a unix socket path has at most 107 characters
    top = Path(tempfile.mkdtemp(prefix="polar-hosts-", dir="/tmp"))
    made = [Engine(name, top / name) for name in ("ha", "hb")]
    try:
        for engine in made:
            engine.start()  # here, not in a thread: dockerd dies with the thread starting it
        at_once(partial(engine.load, tarball) for engine in made)  # side by side
        yield made
    finally:
        at_once(engine.remove for engine in made)
        shutil.rmtree(top, ignore_errors=True)


async def test_stages_follow_the_runtime_across_two_hosts(
    devstack: DevStack, engines: list[Engine], tmp_path: Path
) -> None:
    with endless_backend(delay_s=0.1) as backend:
        base = devstack.settings.model_copy(
            update={"task_queue": "polar-hosts", "upstream_urls": backend.url}
        )
        gateway = Node(base, tmp_path / "gateway", "gateway")
        nodes = [
            Node(
                base,
                tmp_path / e.name,
                e.name,
                host_id=e.name,
                gateway_port=gateway.settings.gateway_port,
            )
            for e in engines
        ]
        source = tmp_path / "src"
        source.mkdir()
        try:
            gateway.start_gateway()
            for node, engine in zip(nodes, engines, strict=True):
                start_host(node, engine, max_run=2)
            polar = PolarClient(await connect(base), base)
            await wait_for_hosts_polling(polar, nodes)
            run = await polar.submit(docker_task("hosts", source, sessions=6, pause_s=1.0))
            result = await polar.wait(run, timeout_s=600)
            host_of = host_by_pid({str(node.pid("worker")): node.name for node in nodes})
            runs = {
                s.session_id: await stage_hosts(polar, s.session_id, host_of)
                for s in result.sessions
            }
        finally:
            for node in (*nodes, gateway):
                node.close()

    check_stayed_on_their_hosts(result, runs, {"ha", "hb"})
    # nothing left behind on either host: no container, no work dir
    for engine, node in zip(engines, nodes, strict=True):
        assert engine.containers() == [], engine.name
        assert runtime_dirs(node) == [], node.name


@pytest.fixture
def without_namespaces() -> None:
    """Skip where network namespaces can be made: tests/system/test_multi_host_netns.py then kills a
    namespace host (worker, engine, containers and its network) and a loopback kill would
    only repeat it."""
    if netns.unavailable() is None:
        pytest.skip("covered by test_multi_host_netns.py (namespace hosts are available)")


async def test_a_lost_host_sessions_go_on_elsewhere_and_nothing_leaks(
    without_namespaces: None, devstack: DevStack, engines: list[Engine], tmp_path: Path
) -> None:
    """The loopback version of the lost-host test, for machines without namespaces."""
    with endless_backend(delay_s=0.1) as backend:
        base = devstack.settings.model_copy(
            update={"task_queue": "polar-hosts-kill", "upstream_urls": backend.url}
        )
        gateway = Node(base, tmp_path / "gateway", "gateway")
        nodes = [
            Node(
                base,
                tmp_path / e.name,
                e.name,
                host_id=e.name,
                gateway_port=gateway.settings.gateway_port,
                sweep_interval_s=5,
            )
            for e in engines
        ]
        source = tmp_path / "src"
        source.mkdir()
        try:
            gateway.start_gateway()
            for node, engine in zip(nodes, engines, strict=True):
                start_host(node, engine, max_run=3)
            polar = PolarClient(await connect(base), base)
            await wait_for_hosts_polling(polar, nodes)
            run = await polar.submit(docker_task("hosts-kill", source, sessions=12, pause_s=4.0))
            lost, survivor = nodes
            # kill host A once it runs harnesses (its worker and its engine)
            lost_pid = f"{lost.pid('worker')}@"
            await wait_for(
                lambda: runs_harness(polar, run, lambda identity: identity.startswith(lost_pid)),
                300,
                "host A running a harness",
                every_s=2,
            )
            os.killpg(lost.pid("worker"), signal.SIGKILL)  # type: ignore[arg-type]
            engines[0].kill()  # dockerd, containerd, shims and containers
            result = await polar.wait(run, timeout_s=900)
            await wait_for(  # the survivor's sweep runs every 5 s
                lambda: not engines[1].containers() and not runtime_dirs(survivor),
                60,
                "the survivor's sweep to leave nothing behind",
                every_s=1,
            )
            host_of = host_by_pid({str(survivor.pid("worker")): survivor.name})
            survivor_containers = engines[1].containers()
        finally:
            for node in (*nodes, gateway):
                node.close()

    moved = check_lost_host_outcome(result, "ha")
    for session in moved:
        runs = await stage_hosts(polar, session.session_id, host_of)
        last_host, later = placements(runs)[-1]
        assert last_host == "hb" and later <= {"hb"}, runs
    # nothing leaked on the surviving host
    assert survivor_containers == [], survivor_containers
    assert runtime_dirs(survivor) == []

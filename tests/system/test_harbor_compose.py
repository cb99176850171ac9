"""A Harbor compose environment: the task's services as sidecars of the session, on docker.

examples/harbor-features/compose-lookup has a `lookup` service beside `main`, which the
agent and the verifier reach at http://lookup:8000 (`main`'s environment gives them the
URL). Run as real Polar sessions with the `command` harness: the oracle (its
solution/solve.sh) scores 1 and a no-op 0, each graded against a fresh `lookup` of the
grading runtime's own. At the runtime level: a session reaches its own sidecar and not
another session's, nor the host (a server the test runs on all the host's addresses, at the
network's gateway), nor an address outside (192.0.2.1, a documentation address); and
nothing of a session (container, sidecars, network) is left after
teardown.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import shlex
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from activities.runtimes.kinds.docker import LABEL, DockerRuntime
from activities.runtimes.kinds.docker_sidecars import network_name, sidecar_name
from app.adversaries import oracle_command
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.spec import HarnessSpec, RuntimeSpec, Sidecar
from tests.support.container_sessions import docker_runtime
from tests.support.eval_runtimes import prepare_session
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor-features" / "compose-lookup"
AGENTS = {"oracle": (oracle_command(TASK / "solution"), 1.0), "noop": ("true", 0.0)}


@pytest.mark.parametrize("agent", list(AGENTS))
async def test_the_tasks_services_run_beside_each_session(
    polar: PolarClient, docker_image: str, agent: str
) -> None:
    ensure_images(TASK)
    command, reward = AGENTS[agent]
    (spec,) = load_harbor_tasks(TASK, harness=HarnessSpec(kind="command", command=command))
    spec = spec.model_copy(
        update={
            "task_id": f"compose-{agent}-{uuid.uuid4().hex[:6]}",
            "timeouts": spec.timeouts.model_copy(update={"max_attempts": 1}),
        }
    )
    assert [s.name for s in spec.runtime.sidecars] == ["lookup"]
    result = await polar.wait(await polar.submit(spec), timeout_s=400)
    (session,) = result.sessions
    print(f"compose {agent}: {session.status} {session.reward} {session.evaluation}")
    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.reward == reward, session.evaluation
    left = docker.from_env().containers.list(
        all=True, filters={"label": f"{LABEL}={session.session_id}"}
    )
    assert left == []  # its container and its sidecar, both runtimes', are gone


@pytest.fixture
def runtime(docker_image: str, tmp_path: Path) -> Iterator[DockerRuntime]:
    yield from docker_runtime(tmp_path / "runtimes")


@contextlib.contextmanager
def host_server() -> Iterator[int]:
    """An HTTP server on every address of the host (0.0.0.0): what a sealed session must not
    reach through its network's bridge."""
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


def _spec(word: str) -> RuntimeSpec:
    serve = f"echo {word} > word.txt && exec python3 -m http.server 8000"
    lookup = Sidecar(
        name="lookup", image="polar/runtime:py311", workdir="/srv", command=["sh", "-c", serve]
    )
    return RuntimeSpec(
        kind="docker", image="polar/runtime:py311", cpus=1, memory="1g", sidecars=[lookup]
    )


PROBE = """
import json, socket, sys, urllib.request as r
def get(url):
    for _ in range(50):
        try:
            return r.urlopen(url, timeout=3).read().decode().strip()
        except Exception as exc:
            last = repr(exc)
            import time; time.sleep(0.2)
    return "unreachable: " + last
def reach(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return True
    except OSError:
        return False
gateway = None
for line in open("/proc/net/route").read().splitlines()[1:]:
    parts = line.split()
    if parts[1] == "00000000" and parts[2] != "00000000":
        gateway = socket.inet_ntoa(bytes.fromhex(parts[2])[::-1])
print(json.dumps({
    "own": get("http://lookup:8000/word.txt"),
    "other": reach(sys.argv[1], 8000),
    "host": [reach(h, int(sys.argv[2])) for h in filter(None, [gateway])],
    "outside": reach("192.0.2.1", 80),
}))
"""


async def test_a_sessions_services_are_its_own_alone(runtime: DockerRuntime) -> None:
    client = docker.from_env()
    a = await prepare_session(runtime, _spec("alpha"), None, f"sc-a-{uuid.uuid4().hex[:6]}")
    b = await prepare_session(runtime, _spec("beta"), None, f"sc-b-{uuid.uuid4().hex[:6]}")
    try:
        b_name = runtime.container_name(b.session_id)
        b_lookup: Any = client.containers.get(sidecar_name(b_name, "lookup"))
        b_net = network_name(b_name)
        b_ip = b_lookup.attrs["NetworkSettings"]["Networks"][b_net]["IPAddress"]
        with host_server() as port:
            script = f"python3 -c {shlex.quote(PROBE)} {b_ip} {port} > probe.json"
            outcome = await runtime.run(a, script, env={}, log_name="probe", timeout_s=120)
            assert outcome.exit_code == 0, runtime.log_paths(a, "probe")[1].read_text()
        found = await runtime.read_files(a, a.workdir, ["probe.json"], 10_000)
        probe = json.loads(found[0]["probe.json"])
        print(f"probe: {probe}")
        assert probe["own"] == "alpha"  # its own sidecar, by name
        assert probe["other"] is False  # not another session's
        assert probe["host"] == [False]  # not the host, at its network's gateway

        assert probe["outside"] is False
    finally:
        for handle in (a, b):
            await runtime.teardown(handle)
    for handle in (a, b):
        name = runtime.container_name(handle.session_id)
        assert (
            client.containers.list(all=True, filters={"label": f"{LABEL}={handle.session_id}"})
            == []
        )
        assert client.networks.list(names=[network_name(name)]) == []


async def test_podman_refuses_sidecars_saying_why(podman_image: str, tmp_path: Path) -> None:
    """Podman's private networks (netavark) leave the host reachable at their gateway: a
    session with sidecars is refused there, as the task's error, naming the docker runtime."""
    from activities.runtimes.base import InvalidRuntime
    from activities.runtimes.kinds.podman import PodmanRuntime

    podman = PodmanRuntime(tmp_path / "runtimes")
    spec = _spec("x").model_copy(update={"kind": "podman"})
    with pytest.raises(InvalidRuntime, match="docker runtime only"):
        await prepare_session(podman, spec, None, f"sc-p-{uuid.uuid4().hex[:6]}")

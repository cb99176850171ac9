"""A Harbor compose environment: the task's services as sidecars of the session, on docker
and podman.

examples/harbor-features/compose-lookup has a `lookup` service beside `main`, which the
agent and the verifier reach at http://lookup:8000 (`main`'s environment gives them the
URL). Run as real Polar sessions with the `command` harness: the oracle (its
solution/solve.sh) scores 1 and a no-op 0, each graded against a fresh `lookup` of the
grading runtime's own. At the runtime level: a session reaches its own sidecar and not
another session's, nor the host (a server the test runs on all the host's addresses, tried
at the network's gateway where it has one and at every address of the host), nor an address
outside (192.0.2.1, a documentation address); on podman its namespace has no interface but
its loopback; and nothing of a session (container, sidecars, network, namespace holder) is
left after teardown, nor after a reap.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import shlex
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from activities.runtimes.kinds.docker_sidecars import network_name, sidecar_name
from app.adversaries import oracle_command
from polar.client.sdk import PolarClient
from polar.contracts import RuntimeHandle
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.spec import RuntimeSpec, Sidecar
from tests.support.container_sessions import (
    docker_runtime,
    podman_modes,
    podman_runtime,
    runtime_root,
    session_containers,
)
from tests.support.eval_runtimes import prepare_session
from tests.support.harbor_sessions import harbor_session
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor-features" / "compose-lookup"
MCP_TASK = REPO / "examples" / "harbor-features" / "mcp-http-vault"
"""its MCP server over HTTP is a sidecar too (docker: test_harbor_mcp_url_session.py)"""
SERVICES = {TASK: ["lookup"], MCP_TASK: ["vault"]}
AGENTS = {"oracle": 1.0, "noop": 0.0}


@pytest.mark.parametrize(
    ("task", "kind"),
    [(TASK, "docker"), (TASK, "podman"), (MCP_TASK, "podman")],
    ids=["docker", "podman", "mcp-url-podman"],
)
@pytest.mark.parametrize("agent", list(AGENTS))
async def test_the_tasks_services_run_beside_each_session(
    polar: PolarClient, podman_image: str, task: Path, kind: str, agent: str
) -> None:
    (built,) = ensure_images(task)
    if kind == "podman":  # the worker's podman (its auto mode); the sidecar's image is the
        from activities.runtimes.kinds.podman import load_from_docker  # runtime's own

        load_from_docker(built.image)
    reward = AGENTS[agent]
    command = oracle_command(task / "solution") if reward else "true"
    (spec,) = load_harbor_tasks(task)
    assert [s.name for s in spec.runtime.sidecars] == SERVICES[task]
    session = await harbor_session(polar, task, command, kind, f"compose-{kind}-{agent}")
    assert session.reward == reward, session.evaluation
    assert (
        session_containers(kind, session.session_id) == []
    )  # its container and sidecars, both runtimes'


RUNTIMES = ["docker", *(f"podman-{mode}" for mode in podman_modes())]


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest, podman_image: str) -> Iterator[Any]:
    kind, _, mode = request.param.partition("-")
    with runtime_root("polar-sc-") as root:
        if kind == "docker":
            yield from docker_runtime(root)
        else:
            yield from podman_runtime(root, mode)


def host_addresses() -> list[str]:
    """Every IPv4 address of the host but loopback's (`ip -o -4 addr`)."""
    proc = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    found = [line.split()[3].split("/")[0] for line in proc.stdout.splitlines()]
    return [a for a in found if not a.startswith("127.")]


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


def _spec(word: str, kind: str = "docker") -> RuntimeSpec:
    serve = f"echo {word} > word.txt && exec python3 -m http.server 8000"
    lookup = Sidecar(
        name="lookup", image="polar/runtime:py311", workdir="/srv", command=["sh", "-c", serve]
    )
    return RuntimeSpec(
        kind=kind, image="polar/runtime:py311", cpus=1, memory="1g", sidecars=[lookup]
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
port = int(sys.argv[2])
print(json.dumps({
    "own": get("http://lookup:8000/word.txt"),
    "other": sys.argv[1] != "-" and reach(sys.argv[1], 8000),
    "gateway": gateway,
    "host": [reach(h, port) for h in filter(None, [gateway, *sys.argv[3:]])],
    "outside": reach("192.0.2.1", 80),
    "interfaces": sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]),
}))
"""


def _other_address(runtime: Any, session_id: str) -> str:
    """Another session's sidecar's address ("-" where it has none outside its namespace)."""
    if runtime.kind != "docker":
        return "-"
    name = runtime.container_name(session_id)
    lookup: Any = docker.from_env().containers.get(sidecar_name(name, "lookup"))
    return str(lookup.attrs["NetworkSettings"]["Networks"][network_name(name)]["IPAddress"])


async def _probe(runtime: Any, handle: Any, other: str, port: int) -> dict[str, Any]:
    args = " ".join([other, str(port), *host_addresses()])
    script = f"python3 -c {shlex.quote(PROBE)} {args} > probe.json"
    outcome = await runtime.run(handle, script, env={}, log_name="probe", timeout_s=120)
    assert outcome.exit_code == 0, runtime.log_paths(handle, "probe")[1].read_text()
    found = await runtime.read_files(handle, handle.workdir, ["probe.json"], 10_000)
    probe: dict[str, Any] = json.loads(found[0]["probe.json"])
    print(f"{runtime.kind} probe: {probe}")
    return probe


async def test_a_sessions_services_are_its_own_alone(runtime: Any) -> None:
    kind = runtime.kind
    a = await prepare_session(runtime, _spec("alpha", kind), None, f"sc-a-{uuid.uuid4().hex[:6]}")
    b = await prepare_session(runtime, _spec("beta", kind), None, f"sc-b-{uuid.uuid4().hex[:6]}")
    try:
        with host_server() as port:
            probe = await _probe(runtime, a, _other_address(runtime, b.session_id), port)
            assert probe["own"] == "alpha"  # its own sidecar, by name
            assert probe["other"] is False  # not another session's
            assert probe["host"] and not any(probe["host"])  # not the host, at any address
            assert probe["outside"] is False
            if kind == "podman":  # a namespace with its loopback only: nothing to route
                assert probe["interfaces"] == ["lo"] and probe["gateway"] is None
            await runtime.reap(a)  # the session's container restarted: its sidecar stays
            again = await _probe(runtime, a, "-", port)
            assert again["own"] == "alpha" and not any(again["host"])
    finally:
        for handle in (a, b):
            await runtime.teardown(handle)
    for handle in (a, b):
        assert session_containers(runtime, handle.session_id) == []
        if kind == "docker":
            name = runtime.container_name(handle.session_id)
            assert docker.from_env().networks.list(names=[network_name(name)]) == []


async def test_a_crashed_workers_sidecars_are_swept(runtime: Any) -> None:
    """A worker that died between starting a session's sidecars and its container (and whose
    session dir is gone) leaves what a host's sweep finds by label and removes: a fresh
    runtime lists the session and its teardown leaves nothing (sidecars, podman's namespace
    holder, docker's network)."""
    handle = await prepare_session(
        runtime, _spec("gamma", runtime.kind), None, f"sc-c-{uuid.uuid4().hex[:6]}"
    )
    name = runtime.container_name(handle.session_id)
    if runtime.kind == "docker":
        docker.from_env().containers.get(name).remove(force=True)
        fresh: Any = type(runtime)(runtime.root)
    else:
        runtime.podman.run("rm", "--force", "--time", "0", name)
        fresh = type(runtime)(runtime.root, mode=runtime.mode)
    shutil.rmtree(runtime.root / handle.session_id)
    assert session_containers(runtime, handle.session_id)  # its sidecars, still there
    assert handle.session_id in await fresh.list_sessions()
    bare = RuntimeHandle(kind=runtime.kind, session_id=handle.session_id, workdir="", host="h")
    assert await fresh.teardown(bare) is True
    assert session_containers(runtime, handle.session_id) == []
    if runtime.kind == "docker":
        assert docker.from_env().networks.list(names=[network_name(name)]) == []


@pytest.mark.parametrize("kind", ["docker", "podman"])
async def test_a_sidecar_built_from_the_tasks_files_runs(
    polar: PolarClient, podman_image: str, kind: str, tmp_path: Path
) -> None:
    """compose-lookup with its service built from a folder of the task (offline, its FROM
    mapped like main's): the oracle reads the word that image baked in."""
    task = Path(shutil.copytree(TASK, tmp_path / "built"))
    folder = task / "environment" / "lookup-image"
    folder.mkdir()
    (folder / "Dockerfile").write_text(
        "FROM polar/runtime:py311\nRUN mkdir -p /srv && echo baked-word > /srv/word.txt\n"
    )
    compose = task / "environment" / "docker-compose.yaml"
    compose.write_text(
        compose.read_text()
        .replace("image: polar/runtime:py311", "build: ./lookup-image")
        .replace("echo sidecar-says-hello > word.txt && ", "")
    )
    (built,) = ensure_images(task)
    (spec,) = load_harbor_tasks(task)
    (sidecar,) = spec.runtime.sidecars
    assert sidecar.image.startswith("polar/harbor-env:") and sidecar.image != built.image
    if kind == "podman":
        from activities.runtimes.kinds.podman import load_from_docker

        for image in (built.image, sidecar.image):
            load_from_docker(image)
    oracle = oracle_command(task / "solution")
    session = await harbor_session(polar, task, oracle, kind, f"compose-built-{kind}")
    assert session.reward == 1.0, session.evaluation

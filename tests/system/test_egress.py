"""Egress for a task that asks for network: granted only where the deployment turns it on.

On the real stack (Temporal, SeaweedFS, Docker, an in-process worker): a docker,
podman and local session (no network of their own) whose `command` harness fetches, through the
HTTP_PROXY it is given, an allowed URL (a loopback server standing in for the
internet, reachable only because this module's deployment exempts its one port)
and a disallowed one. The first answers, the second is refused 403 by the
worker's egress proxy, and both attempts are in the session's `egress.jsonl`
artifact. The same task on the suite's worker (POLAR_EGRESS off, the default)
is refused at its start, non-retryable, naming the reason.
"""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.storage import Storage, artifact_key
from polar.tasks.spec import TaskSpec
from tests.support.container_sessions import small_repo
from tests.support.egress_stack import LoopbackInternet
from tests.support.runtime_kinds import every_runtime_kind

pytestmark = pytest.mark.slow

# the stand-in internet is a loopback name, which NO_PROXY (there for the gateway's port)
# would keep off the proxy: the script says what it was given, then drops NO_PROXY
FETCH = """
import os, sys, urllib.error, urllib.request
print("proxy", os.environ["HTTP_PROXY"], os.environ["HTTPS_PROXY"], os.environ["NO_PROXY"])
os.environ.pop("NO_PROXY"); os.environ.pop("no_proxy")
def status(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
ok = status(sys.argv[1])
no = status(sys.argv[2])
print("allowed", ok[0], ok[1].strip())
print("refused", no[0], no[1].strip())
sys.exit(0 if ok[0] == 200 and no[0] == 403 else 1)
"""


def fetching_task(
    task_id: str, repo: Path, internet: int, image: str, kind: str = "docker"
) -> TaskSpec:
    (repo / "fetch.py").write_text(FETCH)
    allowed = f"http://localhost:{internet}/allowed"
    network = {"mode": "allowlist", "allowed_hosts": ["localhost"]}
    runtime = {"kind": kind, "network": network} | ({"image": image} if kind != "local" else {})
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "source": {"type": "dir", "path": str(repo)},
            "runtime": runtime,
            "harness": {
                "kind": "command",
                "command": f"python3 fetch.py {allowed} http://not-allowed.example/x",
            },
            "timeouts": {"max_attempts": 1},
        }
    )


@pytest.mark.parametrize("kind", every_runtime_kind(["docker", "podman", "local"]))
async def test_a_session_reaches_only_its_allowed_hosts(
    kind: str,
    egress_polar: PolarClient,
    storage: Storage,
    docker_image: str,
    internet: int,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """docker and podman (`--network none`) and the sealed local sandbox (its own network
    namespace): the same door, the same policy."""
    image = request.getfixturevalue("podman_image") if kind == "podman" else docker_image
    spec = fetching_task(
        f"egress-{kind}-{uuid.uuid4().hex[:6]}", small_repo(tmp_path), internet, image, kind
    )
    result = await egress_polar.wait(await egress_polar.submit(spec), timeout_s=180)
    [session] = result.sessions
    sid = session.session_id
    stdout = storage.get_bytes(artifact_key(sid, "harness-attempt1.stdout")).decode()
    stderr = storage.get_bytes(artifact_key(sid, "harness-attempt1.stderr")).decode()
    assert session.status == SessionStatus.COMPLETED, (session.error, stdout, stderr)
    proxy = "http://127.0.0.1:3128"
    assert f"proxy {proxy} {proxy} 127.0.0.1,localhost,::1" in stdout, stdout
    assert "allowed 200 internet says hi to /allowed" in stdout, stdout
    assert (
        "refused 403 polar egress: not-allowed.example:80 is not in the task's allowed_hosts"
        in (stdout)
    ), stdout
    log = storage.get_bytes(artifact_key(sid, "harness-attempt1/egress.jsonl")).decode()
    entries = [json.loads(line) for line in log.splitlines()]
    assert [(e["host"], e["port"], e["allowed"]) for e in entries] == [
        ("localhost", internet, True),
        ("not-allowed.example", 80, False),
    ]
    assert entries[0]["ip"] == "127.0.0.1" and entries[0]["bytes_down"] > 0
    assert entries[1]["ip"] is None and "allowed_hosts" in entries[1]["reason"]


async def test_a_task_asking_for_network_is_refused_where_egress_is_off(
    polar: PolarClient, docker_image: str, internet: int, tmp_path: Path
) -> None:
    """The suite's own worker has the default POLAR_EGRESS=off."""
    assert polar.settings.egress == "off"
    spec = fetching_task(
        f"egress-off-{uuid.uuid4().hex[:6]}", small_repo(tmp_path), internet, docker_image
    )
    result = await polar.wait(await polar.submit(spec), timeout_s=120)
    [session] = result.sessions
    assert session.status == SessionStatus.ERROR
    assert session.error_type == "InvalidTaskSpec", session
    assert "POLAR_EGRESS=off" in (session.error or "")
    assert "runtime.network.mode is 'allowlist'" in (session.error or "")
    assert session.error_stage == "prepare"


VERIFIER_FETCH = """#!/bin/bash
# reward 1 when the allowed URL answers and the other is refused by the egress proxy
python3 - "$@" <<'PY'
import os, urllib.error, urllib.request
os.environ.pop("NO_PROXY"); os.environ.pop("no_proxy")
def status(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
ok = status("http://localhost:PORT/verifier") == 200
no = status("http://not-allowed.example/") == 403
open("/logs/verifier/reward.txt", "w").write("1\\n" if ok and no else "0\\n")
PY
"""


@pytest.fixture
def docker_runtime(docker_image: str, tmp_path: Path) -> Iterator[Any]:
    from tests.support.container_sessions import docker_runtime as runtimes

    yield from runtimes(tmp_path / "runtimes")


async def test_a_harbor_verifier_gets_its_own_network(
    docker_runtime: Any, internet: int, tmp_path: Path
) -> None:
    """A Harbor task whose agent is sealed and whose verifier's network is an allowlist:
    test.sh reaches its allowed host through the egress proxy (reward 1) on a worker with
    egress on, its attempts kept as harbor-egress.jsonl; where egress is off, grading is
    refused (InvalidTaskSpec), never a 0."""
    from temporalio.exceptions import ApplicationError

    from activities.evaluators import get_evaluator
    from activities.evaluators.base import EvaluationJob
    from activities.evaluators.fresh import eval_prepare_request, fresh_runtime
    from polar.settings import get_settings
    from polar.tasks.harbor import load_harbor_tasks
    from polar.tasks.harbor_images import ensure_images
    from tests.support.eval_runtimes import prepare_session, run_harness
    from tests.support.paths import REPO

    task = Path(shutil.copytree(REPO / "examples" / "harbor" / "hello-file", tmp_path / "t"))
    (task / "tests" / "test.sh").write_text(VERIFIER_FETCH.replace("PORT", str(internet)))
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[verifier]\n",
            '[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["localhost"]\n',
        )
    )
    ensure_images(task)
    (spec,) = load_harbor_tasks(task)
    assert spec.runtime.network.sealed and spec.evaluator.harbor is not None
    assert spec.evaluator.harbor["network"]["mode"] == "allowlist"
    base = get_settings().model_copy(update={"source_roots": f"{tmp_path},{REPO}"})
    on = base.model_copy(update={"egress": "proxy", "egress_exempt": [f"127.0.0.1:{internet}"]})
    runtime = docker_runtime
    evaluator = get_evaluator("harbor")
    for settings in (on, base):
        handle = await prepare_session(runtime, spec.runtime, None, f"eg-v-{settings.egress}")
        try:
            await run_harness(runtime, handle, "true")
            prepare = eval_prepare_request(
                handle.session_id, "t", None, spec.runtime, "docker", spec.evaluator
            )
            async with fresh_runtime(runtime, prepare, None) as eval_handle:
                job = EvaluationJob(
                    runtime, handle, runtime, eval_handle, spec.evaluator, 300, settings=settings
                )
                if settings.egress == "off":
                    with pytest.raises(ApplicationError) as info:
                        await evaluator.evaluate(job)
                    assert info.value.type == "InvalidTaskSpec" and info.value.non_retryable
                    assert "evaluator.harbor.network.mode is 'allowlist'" in str(info.value)
                    continue
                evaluation = await evaluator.evaluate(job)
                logs = evaluator.logs(job, evaluation)
        finally:
            await runtime.teardown(handle)
        assert evaluation.reward == 1.0, (evaluation.detail, logs)
        entries = [json.loads(line) for line in logs["harbor-egress.jsonl"].splitlines()]
        assert [(e["host"], e["allowed"]) for e in entries] == [
            ("localhost", True),
            ("not-allowed.example", False),
        ]


LORIS = """
import json, os, socket, sys, time
held, refused = [], 0
# straight to the socket, past the forwarder: bound at /run/polar in a container, at its
# own path (the session dir's channel/) in the root local sandbox
door = "/run/polar/egress.sock"
if not os.path.exists(door):
    door = os.path.join(os.path.dirname(os.getcwd()), "channel", "egress.sock")
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(door)
        s.sendall(b"CONNECT example.com:443 HTTP/1.1\\r\\nX-Slow: ")
        held.append(s)
    except OSError:
        refused += 1
        s.close()
print("LORIS", json.dumps({"held": len(held), "refused": refused}), flush=True)
time.sleep(60)
"""

# the neighbour: its allowed fetch answers; the host's own address and IPv6 spellings of
# loopback are refused 403 by the proxy (never 200, never 502: never even tried)
SPELLINGS = """
import os, sys, urllib.error, urllib.request
os.environ.pop("NO_PROXY"); os.environ.pop("no_proxy")
def status(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
for url in sys.argv[1:]:
    print("STATUS", status(url), url, flush=True)
"""


def _host_address() -> str:
    """One of this machine's non-loopback interface addresses (its default route's: a UDP
    connect sends nothing), or the loopback alias 127.0.0.2 without one."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.2"


def _public_task(task_id: str, repo: Path, image: str, command: str, kind: str) -> TaskSpec:
    runtime: dict[str, object] = {"kind": kind, "network": {"mode": "public"}}
    if kind != "local":
        runtime["image"] = image
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "source": {"type": "dir", "path": str(repo)},
            "runtime": runtime,
            "harness": {"kind": "command", "command": command},
            "timeouts": {"max_attempts": 1},
        }
    )


@pytest.mark.parametrize("kind", every_runtime_kind(["docker", "podman", "local"]))
async def test_egress_slowloris_ends_the_attacker_and_public_never_reaches_the_host(
    kind: str,
    egress_polar: PolarClient,
    storage: Storage,
    docker_image: str,
    internet: int,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Two sessions with `public` egress on one worker (docker, podman, the sealed local
    sandbox): one floods its egress.sock
    with 2,000 half-open connections, and is ended at its 65th, the worker's descriptors
    bounded; its neighbour, at the same time, fetches its allowed URL (200) and is refused
    403 for the worker host's own interface address (a server listening there) and for each
    IPv6 spelling of loopback."""
    import asyncio
    import os

    host = _host_address()
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), LoopbackInternet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host_port = int(server.server_address[1])
    repo = small_repo(tmp_path)
    (repo / "loris.py").write_text(LORIS)
    (repo / "spellings.py").write_text(SPELLINGS)
    urls = [
        f"http://localhost:{internet}/allowed",
        f"http://{host}:{host_port}/host",
        f"http://[::ffff:127.0.0.1]:{internet}/mapped",
        f"http://[::7f00:1]:{internet}/compatible",
        f"http://[64:ff9b::7f00:1]:{internet}/nat64",
        f"http://[2002:7f00:1::]:{internet}/6to4",
    ]
    tag = f"{kind}-{uuid.uuid4().hex[:6]}"
    image = request.getfixturevalue("podman_image") if kind == "podman" else docker_image
    attack = _public_task(f"egress-loris-{tag}", repo, image, "python3 loris.py 2000", kind)
    fetch = "sleep 3; python3 spellings.py " + " ".join(urls)
    honest = _public_task(f"egress-honest-{tag}", repo, image, fetch, kind)
    before, peak = len(os.listdir("/proc/self/fd")), [0]
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], len(os.listdir("/proc/self/fd")))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    try:
        results = await asyncio.gather(
            egress_polar.wait(await egress_polar.submit(attack), timeout_s=240),
            egress_polar.wait(await egress_polar.submit(honest), timeout_s=240),
        )
    finally:
        stop.set()
        await sampler
        server.shutdown()
        server.server_close()
    [attacker], [neighbour] = (r.sessions for r in results)

    def text(sid: str, name: str) -> str:
        return storage.get_bytes(artifact_key(sid, name)).decode(errors="replace")

    a_out = text(attacker.session_id, "harness-attempt1.stdout")
    a_err = text(attacker.session_id, "harness-attempt1.stderr")
    n_out = text(neighbour.session_id, "harness-attempt1.stdout")
    print(
        f"RESULT egress slowloris {kind}: attacker {attacker.status.value} {a_out.strip()!r}; "
        f"worker fds {before} -> peak {peak[0]}; neighbour {neighbour.status.value}:\n{n_out}"
    )
    assert attacker.status == SessionStatus.HARNESS_FAILED, (attacker, a_out, a_err[-2000:])
    assert "polar: the egress socket was shut" in a_err and "more than 64 conn" in a_err, a_err
    assert peak[0] - before < 300, (before, peak)
    assert neighbour.status == SessionStatus.COMPLETED, (neighbour, n_out)
    statuses = {}
    for line in n_out.splitlines():
        if line.startswith("STATUS "):
            _, status, url = line.split(" ")
            statuses[url] = status
    assert statuses.pop(urls[0]) == "200", n_out
    assert statuses == {url: "403" for url in urls[1:]}, n_out
    log = text(neighbour.session_id, "harness-attempt1/egress.jsonl")
    reasons = [json.loads(line).get("reason", "") for line in log.splitlines()]
    print("REASONS", reasons)
    assert "the worker host's own" in reasons[1] or "127.0.0.0/8" in reasons[1], reasons

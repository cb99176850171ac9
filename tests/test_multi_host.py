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

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import docker
import pytest

from polar.devstack import DevStack
from polar.models import SessionStatus, TaskSpec
from polar.sdk import PolarClient
from polar.temporal_client import connect
from tests.support.faults import Node, activity_runs, endless_backend

pytestmark = pytest.mark.slow

IMAGE = "polar/runtime:py311"
HOST_STAGES = {"prepare_eval_runtime", "run_harness", "evaluate", "teardown"}

# a stdlib-only agent (the session image has no openai SDK): a few calls through the gateway
AGENT = """\
import json, os, time, urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
answer = ""
for turn in range(int(os.environ.get("TURNS", "2"))):
    body = json.dumps({"model": "policy", "max_tokens": 8,
                       "messages": [{"role": "user", "content": f"turn {turn}"}]}).encode()
    req = urllib.request.Request(base + "/chat/completions", body, method="POST", headers={
        "Authorization": "Bearer " + key, "Content-Type": "application/json"})
    for _ in range(20):
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                answer = json.load(resp)["choices"][0]["message"]["content"]
            break
        except Exception:
            time.sleep(1)
    time.sleep(float(os.environ.get("PAUSE_S", "0")))
open("answer.txt", "w").write(answer or "none")
"""


@dataclass
class Engine:
    """A dockerd of one host: its socket, roots and process."""

    name: str
    root: Path
    proc: subprocess.Popen | None = None

    @property
    def sock(self) -> Path:
        return self.root / "docker.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.sock}"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "dockerd.log", "ab")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            ["dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none",
             "-H", self.url, "--data-root", str(self.root / "data"),
             "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "docker.pid")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.sock.exists() and self._answers():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        tail = (self.root / "dockerd.log").read_text(errors="replace")[-2000:]
        pytest.skip(f"a second dockerd does not start here: {tail}")

    def _answers(self) -> bool:
        try:
            return docker.DockerClient(base_url=self.url, timeout=5).ping()
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, timeout=120)

    def load(self, image: str) -> None:
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        subprocess.run(["docker", "-H", self.url, "load", "-q"], stdin=save.stdout,
                       check=True, capture_output=True, timeout=600)  # fmt: skip
        assert save.wait() == 0

    def containers(self) -> list[str]:
        return [c.name for c in self.client().containers.list(all=True)]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for container in self.client().containers.list(all=True):
            container.remove(force=True)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def engines(docker_image: str) -> Iterator[list[Engine]]:
    """Two Docker engines of their own, the session image loaded into each."""
    # short paths: a unix socket path has at most 107 characters
    top = Path(tempfile.mkdtemp(prefix="polar-hosts-", dir="/tmp"))
    made = [Engine(name, top / name) for name in ("ha", "hb")]
    try:
        for engine in made:
            engine.start()
            engine.load(docker_image)
        yield made
    finally:
        for engine in made:
            engine.stop()
        shutil.rmtree(top, ignore_errors=True)


def start_host(node: Node, engine: Engine, max_run: int) -> None:
    """The host's `polar worker` (every queue), on its own engine."""
    service = node.stack.worker()
    argv = [*service.argv, "--queues", "workflow,init,run,postrun", "--max-run", str(max_run)]
    env = service.env | {"DOCKER_HOST": engine.url}
    node.stack.start(replace(service, argv=argv, env=env), log=lambda _: None)


def docker_task(task_id: str, source: Path, sessions: int, pause_s: float) -> TaskSpec:
    (source / "agent.py").write_text(AGENT)
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "num_sessions": sessions,
            "source": {"type": "dir", "path": str(source)},
            "runtime": {"kind": "docker", "image": IMAGE},
            "harness": {
                "kind": "command",
                "command": "python agent.py",
                "env": {"TURNS": "2", "PAUSE_S": str(pause_s)},
            },  # fmt: skip
            "evaluator": {"kind": "command", "command": "test -s answer.txt"},
            "timeouts": {"harness_s": 300, "heartbeat_s": 15, "max_attempts": 3},
        }
    )


async def stage_hosts(polar: PolarClient, session_id: str, by_pid: dict[str, str]) -> list:
    """(activity, host) of every started activity of a session, in history order."""
    runs = await activity_runs(polar.client, session_id)
    return [(r.activity, by_pid.get(r.identity.split("@")[0], r.identity)) for r in runs]


def placements(runs: list[tuple[str, str]]) -> list[tuple[str, set[str]]]:
    """Per placement (a prepare_runtime and what followed it): its host and the hosts of
    the host-queue stages after it."""
    out: list[tuple[str, set[str]]] = []
    for activity, host in runs:
        if activity == "prepare_runtime":
            out.append((host, set()))
        elif activity in HOST_STAGES and out:
            out[-1][1].add(host)
    return out


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
            )  # fmt: skip
            for e in engines
        ]
        source = tmp_path / "src"
        source.mkdir()
        try:
            gateway.start_gateway()
            for node, engine in zip(nodes, engines, strict=True):
                start_host(node, engine, max_run=2)
            polar = PolarClient(await connect(base), base)
            run = await polar.submit(docker_task("hosts", source, sessions=6, pause_s=1.0))
            result = await polar.wait(run, timeout_s=600)
            pids = {str(node.pid("worker")): node.name for node in nodes}
            runs = {s.session_id: await stage_hosts(polar, s.session_id, pids)
                    for s in result.sessions}  # fmt: skip
        finally:
            for node in (*nodes, gateway):
                node.close()

    for session in result.sessions:
        assert session.status == SessionStatus.COMPLETED, (session.error, session.warnings)
        assert session.reward == 1.0
        assert not session.warnings, session.warnings
    used: set[str] = set()
    for session_id, session_runs in runs.items():
        placed = placements(session_runs)
        assert len(placed) == 1, session_runs
        host, later = placed[0]
        # every stage that touched the runtime ran on the host that prepared it
        assert later == {host}, (session_id, session_runs)
        assert {a for a, _ in session_runs} >= {"run_harness", "evaluate", "teardown"}
        used.add(host)
    assert used == {"ha", "hb"}, runs  # the task spread over both hosts
    for session in result.sessions:
        assert session.hosts in (["ha"], ["hb"]), session.hosts
    # nothing left behind on either host: no container, no work dir
    for engine, node in zip(engines, nodes, strict=True):
        assert engine.containers() == [], engine.name
        runtimes = Path(node.settings.data_dir) / "runtimes"
        assert not runtimes.exists() or not any(runtimes.iterdir()), list(runtimes.iterdir())


async def _runs_harness(polar: PolarClient, run: object, pid: str) -> bool:
    """Whether the worker `pid` has started a run_harness of the task."""
    for progress in (await polar.status(run)).sessions:  # type: ignore[arg-type]
        with contextlib.suppress(Exception):  # not started yet
            runs = await activity_runs(polar.client, progress.session_id)
            if any(r.activity == "run_harness" and r.identity.startswith(f"{pid}@") for r in runs):
                return True
    return False


async def test_a_lost_host_sessions_go_on_elsewhere_and_nothing_leaks(
    devstack: DevStack, engines: list[Engine], tmp_path: Path
) -> None:
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
            )  # fmt: skip
            for e in engines
        ]
        source = tmp_path / "src"
        source.mkdir()
        try:
            gateway.start_gateway()
            for node, engine in zip(nodes, engines, strict=True):
                start_host(node, engine, max_run=3)
            polar = PolarClient(await connect(base), base)
            run = await polar.submit(docker_task("hosts-kill", source, sessions=12, pause_s=4.0))
            lost, survivor = nodes
            # kill host A once it runs harnesses (its worker and its engine)
            lost_pid = str(lost.pid("worker"))
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not await _runs_harness(polar, run, lost_pid):
                await asyncio.sleep(2)
            os.killpg(lost.pid("worker"), signal.SIGKILL)
            engines[0].proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            result = await polar.wait(run, timeout_s=900)
            await asyncio.sleep(8)  # the survivor's sweep runs every 5 s
            pids = {str(node.pid("worker")): node.name for node in (survivor,)}
            survivor_containers = engines[1].containers()
        finally:
            for node in (*nodes, gateway):
                node.close()

    moved = [s for s in result.sessions if len(s.hosts) > 1]
    assert moved, [(s.session_id, s.status, s.hosts, s.error) for s in result.sessions]
    for session in result.sessions:
        if session.status != SessionStatus.COMPLETED:  # ended clearly, naming the lost host
            assert "host ha lost" in (session.error or ""), session
            continue
        assert session.reward == 1.0
        if len(session.hosts) > 1:
            assert session.hosts[0] == "ha" and session.hosts[-1] == "hb", session.hosts
            assert any("host ha lost" in w for w in session.warnings), session.warnings
    for session in moved:
        runs = await stage_hosts(polar, session.session_id, pids)
        last_host, later = placements(runs)[-1]
        assert last_host == "hb" and later <= {"hb"}, runs
    # nothing leaked on the surviving host
    assert survivor_containers == [], survivor_containers
    runtimes = Path(survivor.settings.data_dir) / "runtimes"
    assert not runtimes.exists() or not any(runtimes.iterdir()), list(runtimes.iterdir())

"""The deployment runs: infra/deploy/compose.local.yaml started for real, one task through it.

Everything comes from locally built images (`build.py --service`: `polar/polar`, on
the debootstrapped runtime image; no registry): Temporal's dev server and SeaweedFS
from the binaries in that image, a gateway and one worker pool per stage, plus a
model backend service (bench's fake vLLM, tests/support/compose_model.py) that the
gateway's POLAR_UPSTREAM_URLS names. The .env is made by `new-env.sh`; the stack is
brought up with docker-compose on the engine that answers (user-defined bridge
networks work on it even with `--bridge=none`: that flag only drops docker0).

A task of Docker sessions with a `command` harness (a stdlib agent making 4 model
calls over its channel, 6 s apart) runs through it, the run pool's worker is
SIGKILLed while the harnesses run and started again (`docker-compose start`),
and every session still completes; then the stack goes down with its volumes.
The test reaches the stack only through the ports it publishes on loopback and
the engine's Unix socket.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
import yaml

from app.devstack import port_open
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import TaskSpec
from polar.temporal_client import connect
from tests.support.faults import activity_runs
from tests.support.polling import wait_for
from tests.support.ports import free_port
from tests.unit.infra.test_deploy import DEPLOY, REPO, compose_cmd, new_env

pytestmark = pytest.mark.slow

SESSIONS = 3
SESSION_IMAGE = "polar/runtime:py311"
SESSION_STAGES = ("worker-init", "worker-run", "worker-postrun")

# a stdlib-only agent (the session image has no openai SDK): TURNS calls through the channel
AGENT = """\
import json, os, time, urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
answers = []
for turn in range(int(os.environ["TURNS"])):
    body = json.dumps({"model": "policy", "max_tokens": 8,
                       "messages": [{"role": "user", "content": f"turn {turn}"}]}).encode()
    req = urllib.request.Request(base + "/chat/completions", body, method="POST", headers={
        "Authorization": "Bearer " + key, "Content-Type": "application/json"})
    for _ in range(30):
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                answers.append(json.load(resp)["choices"][0]["message"]["content"])
            break
        except Exception:
            time.sleep(1)
    time.sleep(float(os.environ["PAUSE_S"]))
open("answer.txt", "w").write("\\n".join(answers))
"""


@dataclass
class Stack:
    """One compose project of compose.local.yaml (plus the test's model service)."""

    project: str
    env_file: Path
    files: list[Path]
    values: dict[str, str]

    def compose(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        files = [a for f in self.files for a in ("-f", str(f))]
        argv = [
            *compose_cmd(required=True),
            "-p",
            self.project,
            "--env-file",
            str(self.env_file),
            *files,
        ]
        out = subprocess.run(
            [*argv, *args], capture_output=True, text=True, timeout=timeout, cwd=DEPLOY
        )
        assert out.returncode == 0, f"{' '.join(args)}: {out.stdout[-2000:]}{out.stderr[-3000:]}"
        return out

    def containers(self, service: str | None = None) -> list:
        labels = [f"com.docker.compose.project={self.project}"]
        if service:
            labels.append(f"com.docker.compose.service={service}")
        return docker.from_env().containers.list(all=True, filters={"label": labels})

    def logs(self) -> str:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            return self.compose("logs", "--no-color", "--tail", "30", timeout=60).stdout[-40000:]
        return "(no logs)"

    def settings(self, data_dir: Path) -> Settings:
        """The host side's view: the published loopback ports, the stack's own S3 keys."""
        return Settings(
            temporal_address=f"127.0.0.1:{self.values['TEMPORAL_PORT']}",
            s3_endpoint=f"http://127.0.0.1:{self.values['S3_PORT']}",
            s3_access_key=self.values["POLAR_S3_ACCESS_KEY"],
            s3_secret_key=self.values["POLAR_S3_SECRET_KEY"],
            task_queue="polar",
            data_dir=data_dir,
        )


def build_service_image() -> str:
    """polar/polar from this checkout (infra/images/build.py --service; cached by recipe): its
    recipe tag, which another checkout's rebuild of `latest` does not move."""
    argv = [sys.executable, str(REPO / "infra" / "images" / "build.py"), "--service"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        pytest.fail(f"service image build failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    (tag,) = set(re.findall(r"polar/polar:r-[0-9a-f]+", proc.stdout))
    return tag


def write_env(top: Path, image: str, host_id: str) -> dict[str, str]:
    """The .env of new-env.sh, with this run's image, ports, data dir, host id and model."""
    env_file = new_env(top)
    values = dict(
        line.split("=", 1)
        for line in env_file.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    values |= {
        "POLAR_IMAGE": image,
        "POLAR_UPSTREAM_URLS": "http://model:8000/v1",
        "POLAR_WORKER_DATA_DIR": str(top / "data"),
        "POLAR_HOST_ID": host_id,
        "TEMPORAL_PORT": str(free_port()),
        "TEMPORAL_UI_PORT": str(free_port()),
        "S3_PORT": str(free_port()),
        "GATEWAY_REPLICAS": "1",
        "RUN_REPLICAS": "1",
    }
    env_file.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return values


def model_service(path: Path) -> Path:
    """A compose override adding the model backend, on the internal network only."""
    override = {
        "services": {
            "model": {
                "image": "${POLAR_IMAGE:-polar/polar:latest}",
                "entrypoint": ["python3", "/srv/polar-test/tests/support/compose_model.py"],
                "environment": {"PYTHONPATH": "/srv/polar-test"},
                "volumes": [
                    f"{REPO / 'bench'}:/srv/polar-test/bench:ro",
                    f"{REPO / 'tests' / 'support' / 'compose_model.py'}:"
                    "/srv/polar-test/tests/support/compose_model.py:ro",
                ],
                "networks": ["backend"],
            },
            "gateway": {"depends_on": ["model"]},
        }
    }
    path.write_text(yaml.safe_dump(override))
    return path


@pytest.fixture
def stack(docker_image: str) -> Iterator[Stack]:
    image = build_service_image()
    top = Path(tempfile.mkdtemp(prefix="polar-compose-", dir="/tmp"))
    tag = uuid.uuid4().hex[:8]
    values = write_env(top, image, host_id=f"compose-{tag}")
    files = [DEPLOY / "compose.local.yaml", model_service(top / "model.yaml")]
    made = Stack(f"polartest{tag}", top / ".env", files, values)
    try:
        made.compose("up", "-d", timeout=900)
        yield made
    finally:
        print(made.logs())
        made.compose("down", "-v", "--remove-orphans", "-t", "5", timeout=300)
        # session containers are the engine's, not the project's: none may be left
        leftover = docker.from_env().containers.list(
            all=True, filters={"label": f"polar.host={values['POLAR_HOST_ID']}"}
        )
        for container in leftover:
            container.remove(force=True)
        shutil.rmtree(top, ignore_errors=True)
        assert not leftover, [c.name for c in leftover]


def task(task_id: str) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "num_sessions": SESSIONS,
            "runtime": {"kind": "docker", "image": SESSION_IMAGE},
            "harness": {
                "kind": "command",
                "command": 'python3 -c "$AGENT"',
                "env": {"AGENT": AGENT, "TURNS": "4", "PAUSE_S": "6"},
            },
            "evaluator": {"kind": "command", "command": "grep -q answer answer.txt"},
            "timeouts": {"harness_s": 300, "heartbeat_s": 10, "max_attempts": 3},
        }
    )


def session_containers(host_id: str) -> list:
    return docker.from_env().containers.list(filters={"label": f"polar.host={host_id}"})


async def test_compose_stack_runs_a_task_through_a_worker_restart(stack: Stack) -> None:
    started = time.monotonic()
    settings = stack.settings(stack.env_file.parent / "client")
    host_id = stack.values["POLAR_HOST_ID"]
    assert port_open("127.0.0.1", int(stack.values["TEMPORAL_PORT"]))

    # sealing as deployed: no host networking; backend internal; pools share the host id
    client = docker.from_env()
    networks = {n.name: n for n in client.networks.list(names=[stack.project])}
    assert networks[f"{stack.project}_backend"].attrs["Internal"] is True
    for container in stack.containers():
        assert container.attrs["HostConfig"]["NetworkMode"] != "host", container.name
    for service in SESSION_STAGES:
        (container,) = stack.containers(service)
        env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
        assert env["POLAR_HOST_ID"] == host_id

    polar = PolarClient(await connect(settings), settings)
    run = await polar.submit(task(f"compose-{uuid.uuid4().hex[:6]}"))
    (run_worker,) = stack.containers("worker-run")

    storage = Storage(settings)

    async def harness_mid_run() -> bool:
        """A run_harness is pending (history shows an attempt only once it ends) and its
        harness has made a call (recorded by the gateway): more calls are to come."""
        for progress in (await polar.status(run)).sessions:
            with contextlib.suppress(Exception):  # not started yet
                described = await polar.client.get_workflow_handle(progress.session_id).describe()
                pending = described.raw_description.pending_activities
                if any(a.activity_type.name == "run_harness" for a in pending) and (
                    storage.list_completions(progress.session_id)
                ):
                    return True
        return False

    await wait_for(harness_mid_run, 300, "a harness running in a session container", every_s=0.5)
    # the sessions' containers: no network, two mounts, read-only: the channel dir and
    # Polar's toolbox (the main process, activities/runtimes/toolbox.py)
    for container in session_containers(host_id):
        assert container.attrs["HostConfig"]["NetworkMode"] == "none", container.name
        mounts = container.attrs["Mounts"]
        binds = sorted(m["Destination"] for m in mounts if m["Type"] == "bind")
        assert binds == ["/run/polar", "/run/polar-tools"], binds
        assert all(not m["RW"] for m in mounts if m["Type"] == "bind")

    # mid-harness (each makes a call every PAUSE_S): the run pool's worker dies (SIGKILL, as
    # `docker-compose kill` sends it, through the engine's API: the CLI takes seconds to start)
    before = run_worker.attrs["State"]["StartedAt"]
    run_worker.kill(signal="SIGKILL")
    killed_at = time.monotonic()
    run_worker.reload()
    assert run_worker.attrs["State"]["ExitCode"] == 137, run_worker.attrs["State"]
    stack.compose("start", "worker-run")
    result = await polar.wait(run, timeout_s=600)
    elapsed = time.monotonic() - started
    run_worker.reload()
    assert run_worker.attrs["State"]["Running"], "the run pool did not come back"
    assert run_worker.attrs["State"]["StartedAt"] != before

    retried, harness_runs = 0, {}
    for session in result.sessions:
        assert session.status == SessionStatus.COMPLETED, (session.error, session.warnings)
        assert session.reward == 1.0, session.evaluation
        assert session.hosts == [host_id], session.hosts
        records = storage.list_completions(session.session_id)
        assert len(records) >= 3 and all(r.status_code == 200 for r in records)
        runs = await activity_runs(polar.client, session.session_id)
        harness_runs[session.session_id] = [r for r in runs if r.activity == "run_harness"]
        retried += any(r.activity == "run_harness" and r.attempt > 1 for r in runs)
    assert retried >= 1, f"no harness was cut off by the worker's kill: {harness_runs}"
    assert session_containers(host_id) == []  # torn down
    after_kill = time.monotonic() - killed_at
    print(
        f"compose stack: {SESSIONS} docker sessions completed in {elapsed:.1f}s after up "
        f"({after_kill:.1f}s after the kill), {retried} run_harness retried"
    )

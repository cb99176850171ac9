"""Simulated worker hosts for the multi-host tests: engines, workers, tasks and history checks.

A *host* here is a `polar worker` process with its own `POLAR_HOST_ID` and data
dir, and its own Docker engine: a `dockerd` started by the test with its own
socket, data root, exec root and pidfile (`--iptables=false --bridge=none`:
sessions have no network anyway), in a mount namespace of its own (so its
mounts go with it when it is killed), optionally inside a network namespace
(`enter`: an argv prefix such as `nsenter --net=...`). The session image is
loaded into each engine from one `docker save` tarball per test session.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import docker
import pytest
from temporalio.api.enums.v1 import PendingActivityState

from app.console.topology import Queue, describe_queue
from polar.client.sdk import PolarClient
from polar.contracts import SessionResult, TaskResult
from polar.processes import dying_with_parent
from polar.records import SessionStatus
from polar.tasks.spec import TaskSpec
from tests.support.faults import Node, activity_runs
from tests.support.polling import wait_for, wait_until
from workflows.queues import Queues

IMAGE = "polar/runtime:py311"
# the stages that touch a session's runtime after prepare_runtime: they must run on its host
HOST_STAGES = frozenset({"prepare_eval_runtime", "run_harness", "evaluate", "teardown"})

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

_tarballs: dict[str, Path] = {}


def at_once(steps: Iterable[Callable[[], object]]) -> None:
    """Run `steps` in threads at once (loading an image, stopping a host: mostly waiting on
    dockerd and the disk), then raise the first failure, if any (a skip included), once every
    step has ended. Never a step that starts a process meant to outlive it: a child made
    `dying_with_parent` gets its SIGKILL when the thread that started it ends."""
    with ThreadPoolExecutor() as pool:
        futures = [pool.submit(step) for step in steps]
    for future in futures:
        future.result()


def image_tarball(image: str, cache_dir: Path) -> Path:
    """`docker save` of `image` from the default engine, made once per test session."""
    if image not in _tarballs:
        path = cache_dir / "image.tar"
        subprocess.run(
            ["docker", "save", "-o", str(path), image], check=True, capture_output=True, timeout=600
        )
        _tarballs[image] = path
    return _tarballs[image]


def kill_pids(pids: Iterable[int]) -> None:
    """SIGKILL each of `pids` (those already gone are skipped)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def pids_whose_cmdline_has(text: str) -> set[int]:
    """Live processes whose command line contains `text`."""
    wanted, mine, out = text.encode(), str(os.getpid()), set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == mine:
            continue
        with contextlib.suppress(OSError):
            if wanted in (entry / "cmdline").read_bytes():
                out.add(int(entry.name))
    return out


@dataclass
class Engine:
    """A dockerd of one host: its socket, roots and process; `enter` runs it in a namespace."""

    name: str
    root: Path
    enter: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None

    @property
    def sock(self) -> Path:
        return self.root / "docker.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.sock}"

    def start(self) -> None:
        """Start dockerd and wait until it answers (skip the test if it cannot start here)."""
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "dockerd.log", "ab")  # noqa: SIM115 - lives with the process
        argv = [
            *self.enter,
            "unshare",
            "--mount",
            "--propagation",
            "slave",
            "--",
            "dockerd",
            "--iptables=false",
            "--ip6tables=false",
            "--bridge=none",
            "-H",
            self.url,
            "--data-root",
            str(self.root / "data"),
            "--exec-root",
            str(self.root / "exec"),
            "--pidfile",
            str(self.root / "docker.pid"),
        ]
        self.proc = subprocess.Popen(
            dying_with_parent(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def answers() -> bool:
            assert self.proc.poll() is None, "dockerd exited"
            return self.sock.exists() and self._answers()

        try:
            wait_until(answers, 90, "its own dockerd", every_s=0.5)
            return
        except AssertionError:
            pass
        tail = (self.root / "dockerd.log").read_text(errors="replace")[-2000:]
        self.kill()
        pytest.skip(f"a dockerd of its own does not start here: {tail}")

    def _answers(self) -> bool:
        try:
            return docker.DockerClient(base_url=self.url, timeout=5).ping()
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, timeout=120)

    def load(self, tarball: Path) -> None:
        subprocess.run(
            ["docker", "-H", self.url, "load", "-q", "-i", str(tarball)],
            check=True,
            capture_output=True,
            timeout=600,
        )

    def containers(self) -> list[str]:
        return [c.name for c in self.client().containers.list(all=True)]

    def pids(self) -> set[int]:
        """Every process of this engine: dockerd, containerd, the shims (their command lines
        name the engine's roots) and each container's init (its PID namespace goes with it)."""
        out = pids_whose_cmdline_has(str(self.root))
        if self.alive():
            with contextlib.suppress(Exception):  # the engine is going down
                api = self.client().api
                for container in api.containers(quiet=True):
                    pid = api.inspect_container(container["Id"])["State"]["Pid"]
                    if pid:
                        out.add(pid)
        return out

    def kill(self) -> None:
        """SIGKILL the engine and all it runs at once, as a host losing power would."""
        kill_pids(self.pids())
        if self.proc is not None:
            self.proc.wait()

    def stop(self) -> None:
        """Remove its containers and stop it (whatever is left of it is killed)."""
        if self.alive():
            with contextlib.suppress(Exception):  # an engine in trouble: killed below
                for container in self.client().containers.list(all=True):
                    container.remove(force=True)
            self.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)  # type: ignore[union-attr]
        self.kill()  # leftovers: shims, or all of it after a timeout

    def remove(self) -> None:
        """Stop it and delete its roots."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def start_host(node: Node, engine: Engine, max_run: int, enter: list[str] | None = None) -> None:
    """The host's `polar worker` (every queue) on its own engine, inside `enter` if given."""
    service = node.stack.worker()
    argv = [
        *(enter or []),
        *service.argv,
        "--queues",
        "workflow,init,run,postrun",
        "--max-run",
        str(max_run),
    ]
    env = service.env | {"DOCKER_HOST": engine.url}
    node.stack.start(replace(service, argv=argv, env=env), log=lambda _: None)


async def wait_for_hosts_polling(polar: PolarClient, nodes: Iterable[Node]) -> None:
    """Until every node's worker polls the shared init queue: a worker writes its ready file
    once it has started polling, but under load the server may not list a slow host's pollers
    yet, and a task submitted then is prepared wholly on the host that was first."""
    pids = {f"{node.pid('worker')}@" for node in nodes}
    await wait_for_pollers(polar, pids, lambda identity: identity.split("@")[0] + "@")


async def wait_for_pollers(
    polar: PolarClient, expected: set[str], key: Callable[[str], str], timeout_s: float = 60
) -> None:
    """Until the server lists a poller of the shared init queue for each of `expected`
    (`key` of a poller's identity: its pid, its host)."""
    settings = polar.settings
    init = Queues.for_workflow_queue(settings.task_queue).init

    async def all_polling() -> bool:
        queue = Queue(init, "init", None, "activity")
        await describe_queue(polar.client, settings.temporal_namespace, queue)
        return expected <= {key(p.identity) for p in queue.pollers}

    await wait_for(
        all_polling,
        timeout_s,
        f"a worker of each of {sorted(expected)} polling {init}",
        every_s=0.5,
    )


def docker_task(task_id: str, source: Path, sessions: int, pause_s: float) -> TaskSpec:
    """`sessions` Docker sessions of the gateway-calling AGENT, graded by a command."""
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
            },
            "evaluator": {"kind": "command", "command": "test -s answer.txt"},
            "timeouts": {"harness_s": 300, "heartbeat_s": 15, "max_attempts": 3, "host_wait_s": 30},
        }
    )


async def stage_hosts(
    polar: PolarClient, session_id: str, host_of: Callable[[str], str]
) -> list[tuple[str, str]]:
    """(activity, host) of every started activity of a session, in history order; `host_of`
    names the host of a worker identity (the `identity` of ActivityTaskStarted)."""
    runs = await activity_runs(polar.client, session_id)
    return [(r.activity, host_of(r.identity)) for r in runs]


def host_by_pid(pids: dict[str, str]) -> Callable[[str], str]:
    """`host_of` for identities `pid@hostname`: the host whose worker has that pid."""
    return lambda identity: pids.get(identity.split("@")[0], identity)


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


async def harness_workers(polar: PolarClient, run: object) -> list[str]:
    """The identities of the workers that run a run_harness of the task now. History holds
    an activity's started event only once it closed (so a run read from it has often ended
    already), so a running one is read from the sessions' pending activities (the worker
    that picked it up)."""
    identities: list[str] = []
    for progress in (await polar.status(run)).sessions:  # type: ignore[arg-type]
        try:
            described = await polar.client.get_workflow_handle(progress.session_id).describe()
        except Exception:  # noqa: BLE001 - its workflow not started yet
            continue
        identities += [
            pending.last_worker_identity
            for pending in described.raw_description.pending_activities
            if pending.activity_type.name == "run_harness"
            and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        ]
    return identities


async def runs_harness(polar: PolarClient, run: object, on_host: Callable[[str], bool]) -> bool:
    """Whether a worker whose identity `on_host` accepts runs a run_harness of the task now."""
    return any(on_host(identity) for identity in await harness_workers(polar, run))


def runtime_dirs(node: Node) -> list[Path]:
    """The session work dirs left under a host's data dir (not the worker's own hidden
    state beside them, such as the containers' toolbox: a name no session id can take)."""
    runtimes = Path(node.settings.data_dir) / "runtimes"
    if not runtimes.exists():
        return []
    return sorted(p for p in runtimes.iterdir() if not p.name.startswith("."))


def check_stayed_on_their_hosts(
    result: TaskResult, runs: dict[str, list[tuple[str, str]]], hosts: set[str]
) -> None:
    """Every session completed on one host, every stage after prepare ran on the host that
    prepared it (`runs`: `stage_hosts` per session id), and the task used all `hosts`."""
    for session in result.sessions:
        assert session.status == SessionStatus.COMPLETED, (session.error, session.warnings)
        assert session.reward == 1.0
        assert not session.warnings, session.warnings
        assert len(session.hosts) == 1 and session.hosts[0] in hosts, session.hosts
    used: set[str] = set()
    for session_id, session_runs in runs.items():
        placed = placements(session_runs)
        assert len(placed) == 1, session_runs
        host, later = placed[0]
        # every stage that touched the runtime ran on the host that prepared it
        assert later == {host}, (session_id, session_runs)
        assert {a for a, _ in session_runs} >= {"run_harness", "evaluate", "teardown"}
        used.add(host)
    assert used == hosts, runs  # the task spread over every host


def check_lost_host_outcome(result: TaskResult, lost: str) -> list[SessionResult]:
    """Each session completed, or ended naming the lost host; some moved off it (returned),
    each with a warning that names the lost host and a last placement elsewhere."""
    moved = [s for s in result.sessions if len(s.hosts) > 1]
    assert moved, [(s.session_id, s.status, s.hosts, s.error) for s in result.sessions]
    for session in result.sessions:
        if session.status != SessionStatus.COMPLETED:  # ended clearly, naming the lost host
            assert f"host {lost} lost" in (session.error or ""), session
            continue
        assert session.reward == 1.0
        if len(session.hosts) > 1:
            assert session.hosts[0] == lost and session.hosts[-1] != lost, session.hosts
            assert any(f"host {lost} lost" in w for w in session.warnings), session.warnings
    return moved

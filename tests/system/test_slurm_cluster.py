"""A real Slurm cluster: Polar's worker jobs, as an ordinary user, sealed by bwrap, on 3 nodes.

munged, slurmctld and three slurmd "nodes" (`n1`..`n3`, each a network + UTS
namespace with its own hostname and address; tests/support/slurm.py). The
suite's Temporal and S3 are relayed onto the root-side service address, a
gateway is bound there. `infra/deploy/slurm/worker.sbatch` is submitted with
`sbatch` as the test user, once per node (`-w NODE`): each worker's host id is
its SLURMD_NODENAME and its `local` sessions run in the bwrap sandbox.

The first test runs 12 sessions: they spread over the nodes and each session's
stages ran on its node (the histories' activity identities, `pid@NODE`). The
second cancels n3's worker job mid-task the graceful way (`scancel --batch
--signal=TERM`: the worker stops polling, lets running stages finish, removes
its runtimes, exits): its sessions go on elsewhere or end saying "host n3
lost", and nothing is left on n3 (no process of the user, no data dir).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType

from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.settings import Settings
from polar.tasks.spec import TaskSpec
from polar.temporal_client import connect
from tests.support import slurm, unprivileged
from tests.support.faults import Node, endless_backend
from tests.support.hosts import (
    AGENT,
    check_stayed_on_their_hosts,
    placements,
    runs_harness,
    stage_hosts,
    wait_for_pollers,
)
from tests.support.polling import wait_for
from tests.support.relay import tcp_relays

pytestmark = pytest.mark.slow

NODES = ("n1", "n2", "n3")
GRACE_S = 30.0
"""The workers' POLAR_SHUTDOWN_GRACE_S: how long a stage in flight at SIGTERM may go on."""
CLOSED = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "completed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "failed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "timed_out",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "canceled",
}
TEMPLATE = unprivileged.ROOT / "infra" / "deploy" / "slurm" / "worker.sbatch"


@dataclass
class Polar:
    settings: Settings
    cluster: slurm.Cluster
    work: Path
    source: Path
    jobs: dict[str, str]


def host_of(identity: str) -> str:
    return identity.rsplit("@", 1)[-1]


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1].rstrip("/"))


def _user_pids(cluster: slurm.Cluster, node: str) -> set[int]:
    """Processes of the test user inside `node`'s namespace."""
    uid = unprivileged.ensure_user().pw_uid
    host = cluster.net.hosts[node]
    out = set()
    for pid in host.pids():
        try:
            if Path(f"/proc/{pid}").stat().st_uid == uid:
                out.add(pid)
        except OSError:
            continue
    return out


@pytest.fixture(scope="module")
def polar_on_slurm(devstack: DevStack) -> Iterator[Polar]:
    reason = slurm.unavailable() or unprivileged.unavailable()
    if reason:
        print(f"skipping the Slurm cluster test: {reason}")
        pytest.skip(reason)
    suite = devstack.settings
    with ExitStack() as stop:
        top = Path(tempfile.mkdtemp(prefix="polar-slurm-", dir="/tmp"))
        top.chmod(0o755)  # the user's sbatch reads slurm.conf under it
        stop.callback(shutil.rmtree, top, ignore_errors=True)
        cluster = stop.enter_context(slurm.slurm_cluster(top / "slurm", list(NODES)))
        address = cluster.net.service_address
        ports = _port(suite.temporal_address), _port(suite.s3_endpoint or "")
        stop.enter_context(tcp_relays([((address, p), ("127.0.0.1", p)) for p in ports]))
        backend = stop.enter_context(endless_backend(delay_s=0.1))
        shared = suite.model_copy(
            update={
                "task_queue": "polar-slurm",
                "upstream_urls": backend.url,
                "gateway_host": address,
            }
        )
        gateway = Node(shared, top / "gateway", "gateway")
        stop.callback(gateway.close)
        gateway.start_gateway()
        work = unprivileged.user_dir("polar-slurm-jobs-")
        stop.callback(shutil.rmtree, work, ignore_errors=True)
        source = work / "src"
        source.mkdir()
        (source / "agent.py").write_text(AGENT)
        entry = unprivileged.ensure_user()
        shutil.chown(source, entry.pw_uid, entry.pw_gid)
        remote = shared.model_copy(
            update={
                "temporal_address": f"{address}:{ports[0]}",
                "s3_endpoint": f"http://{address}:{ports[1]}",
                "gateway_url": gateway.settings.gateway_base_url,
                "source_roots": str(source),
                "sweep_interval_s": 5,
                "max_run": 2,
                "shutdown_grace_s": GRACE_S,
            }
        )
        env = unprivileged.python_env(remote.as_env())
        env.pop("POLAR_DATA_DIR", None)  # the template's: node-local, per job
        env.pop("POLAR_HOST_ID", None)  # the template's: SLURMD_NODENAME
        env |= {
            "POLAR_CMD": f"{unprivileged.SYSTEM_PYTHON} -m app.cli",
            "POLAR_SLURM_DIR": str(TEMPLATE.parent),
            "SLURM_CONF": cluster.env["SLURM_CONF"],
        }
        jobs: dict[str, str] = {}
        for node in NODES:
            argv = [
                "sbatch",
                "--parsable",
                "-w",
                node,
                "-D",
                str(unprivileged.ROOT),
                "-o",
                str(work / f"worker-{node}.log"),
                str(TEMPLATE),
            ]
            user = unprivileged.as_user(["env", "-i", *(f"{k}={v}" for k, v in env.items())])
            jobs[node] = cluster.run(argv, user).strip().split(";")[0]
        stop.callback(lambda: [cluster.run(["scancel", j]) for j in jobs.values()])

        def all_polling() -> bool:
            return all(
                "worker serving" in (work / f"worker-{n}.log").read_text(errors="replace")
                for n in NODES
                if (work / f"worker-{n}.log").exists()
            ) and all((work / f"worker-{n}.log").exists() for n in NODES)

        try:
            wait_for_sync(all_polling, 120, "a worker job polling on every node")
        except AssertionError:
            logs = {
                n: (work / f"worker-{n}.log").read_text()[-2000:]
                for n in NODES
                if (work / f"worker-{n}.log").exists()
            }
            ctl = cluster.log("slurmctld.log")
            raise AssertionError(f"worker jobs did not start: {logs} {ctl}") from None
        yield Polar(shared, cluster, work, source, jobs)


@dataclass
class HarnessRun:
    """One run_harness activity of a session's history: who ran it, when, how it closed."""

    identity: str
    started: datetime
    closed: datetime | None
    outcome: str  # completed, failed, timed_out, canceled, or open


async def harness_runs(polar: PolarClient, session_id: str) -> list[HarnessRun]:
    history = await polar.client.get_workflow_handle(session_id).fetch_history()
    harness: set[int] = set()
    started: dict[int, tuple[str, datetime]] = {}
    closed: dict[int, tuple[str, datetime]] = {}
    for event in history.events:
        when = event.event_time.ToDatetime(tzinfo=UTC)
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == "run_harness":
                harness.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            started[attrs.scheduled_event_id] = (attrs.identity, when)
        elif event.event_type in CLOSED:
            outcome = CLOSED[event.event_type]
            attrs = getattr(event, f"activity_task_{outcome}_event_attributes")
            closed[attrs.scheduled_event_id] = (outcome, when)
    runs = []
    for scheduled in sorted(harness & set(started)):
        identity, at = started[scheduled]
        outcome, end = closed.get(scheduled, ("open", None))
        runs.append(HarnessRun(identity, at, end, outcome))
    return runs


def wait_for_sync(check: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def _task(task_id: str, source: Path, sessions: int, pause_s: float) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "num_sessions": sessions,
            "source": {"type": "dir", "path": str(source)},
            "runtime": {"kind": "local"},
            "harness": {
                "kind": "command",
                "command": "python3 agent.py",
                "env": {"TURNS": "2", "PAUSE_S": str(pause_s)},
            },
            "evaluator": {"kind": "command", "command": "test -s answer.txt"},
            "timeouts": {"harness_s": 300, "heartbeat_s": 15, "max_attempts": 3, "host_wait_s": 30},
        }
    )


async def test_worker_jobs_run_sessions_on_their_nodes(polar_on_slurm: Polar) -> None:
    p = polar_on_slurm
    polar = PolarClient(await connect(p.settings), p.settings)
    # the server lists every node's worker (else the first may take all twelve)
    await wait_for_pollers(polar, set(NODES), host_of)
    started = time.monotonic()
    result = await polar.wait(
        await polar.submit(_task("slurm", p.source, sessions=12, pause_s=1.0)), timeout_s=900
    )
    print(f"12 sessions over {len(NODES)} Slurm nodes: {time.monotonic() - started:.0f}s")
    runs = {s.session_id: await stage_hosts(polar, s.session_id, host_of) for s in result.sessions}
    check_stayed_on_their_hosts(result, runs, set(NODES))
    for log in (p.work / f"worker-{n}.log" for n in NODES):
        assert "local runtime: bwrap sandbox" in log.read_text(), log.read_text()[-2000:]


async def test_a_cancelled_worker_job_is_survived_and_nothing_leaks(polar_on_slurm: Polar) -> None:
    p = polar_on_slurm
    lost, survivors = "n3", ("n1", "n2")
    polar = PolarClient(await connect(p.settings), p.settings)
    run = await polar.submit(_task("slurm-cancel", p.source, sessions=12, pause_s=4.0))
    await wait_for(
        lambda: runs_harness(polar, run, lambda identity: host_of(identity) == lost),
        300,
        f"node {lost} running a harness",
        every_s=2,
    )
    job = p.jobs[lost]
    cancelled_at = datetime.now(UTC)
    p.cluster.run(["scancel", "--batch", "--signal=TERM", job])
    wait_for_sync(lambda: job not in p.cluster.jobs(), 120, f"job {job} to end")
    log = (p.work / f"worker-{lost}.log").read_text()
    assert "worker leaving" in log, log[-3000:]
    result = await polar.wait(run, timeout_s=900)
    print(f"after cancelling {lost}'s job: {[s.hosts for s in result.sessions]}")
    # nothing of the job is left on its node: no process of the user, no data dir
    assert _user_pids(p.cluster, lost) == set()
    assert not list(Path("/tmp").glob(f"polar-{job}")), "the job's data dir is left"
    # a drained node: each session completed (its stages on one node each placement, a
    # re-placed one last on a survivor) or ended naming the lost node
    for session in result.sessions:
        placed = placements(await stage_hosts(polar, session.session_id, host_of))
        assert all(later <= {where} for where, later in placed), placed
        if session.status != SessionStatus.COMPLETED:
            assert f"host {lost} lost" in (session.error or ""), session
            continue
        assert session.reward == 1.0, session
        if len(session.hosts) > 1:
            assert session.hosts[0] == lost and placed[-1][0] in survivors, placed
    assert any(lost in s.hosts for s in result.sessions), "no session ran on the node"
    # after its job ended, no session was placed on it
    assert all(s.hosts[-1] in survivors or s.hosts == [lost] for s in result.sessions)
    # the harnesses running on the node at SIGTERM: each finished there within the grace
    # period, or its session was placed again on a survivor (or ended naming the node)
    in_flight = []
    for session in result.sessions:
        for r in await harness_runs(polar, session.session_id):
            running = r.started <= cancelled_at and (r.closed is None or r.closed >= cancelled_at)
            if host_of(r.identity) == lost and running:
                in_flight.append((session, r))
    assert in_flight, "no harness was running on the node when its job got SIGTERM"
    finished = [r for _, r in in_flight if r.outcome == "completed"]
    for session, r in in_flight:
        if r.outcome == "completed":
            assert r.closed is not None
            assert r.closed - cancelled_at <= timedelta(seconds=GRACE_S + 5), r
        else:  # cancelled at the grace's end, or lost with the node: re-placed
            assert session.hosts[-1] in survivors or f"host {lost} lost" in (session.error or "")
    latest = (
        max((r.closed - cancelled_at).total_seconds() for r in finished if r.closed)
        if finished
        else 0.0
    )
    print(
        f"{len(in_flight)} harnesses in flight on {lost} at SIGTERM: {len(finished)} finished "
        f"within the {GRACE_S:.0f}s grace (the last {latest:.1f}s after), "
        f"{len(in_flight) - len(finished)} re-placed"
    )

"""Two worker processes and two gateways on one Temporal and one S3: sessions spread across them.

Each node has its own data dir, gateway process and `polar worker` process
(`--queues workflow,init,run,postrun --max-run 2`); a worker's harnesses talk to
its node's gateway (`POLAR_GATEWAY_PORT` per worker), so sessions alternate
gateways through which worker ran them. With 6 sessions and `--max-run 2` per
worker, neither worker can hold every harness at once, so both must serve.
"""

from __future__ import annotations

import pytest

from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.temporal_client import connect
from tests.support.faults import Node, activity_runs, endless_backend, fault_task

pytestmark = pytest.mark.slow


async def test_two_workers_two_gateways_share_sessions(devstack: DevStack, tmp_path) -> None:
    with endless_backend(delay_s=0.2) as backend:
        base = devstack.settings.model_copy(
            update={"task_queue": "polar-scale", "upstream_urls": backend.url}
        )
        nodes = [Node(base, tmp_path / name, name) for name in ("a", "b")]
        try:
            for node in nodes:
                node.start_gateway()
                node.start_worker("workflow,init,run,postrun", max_run=2)
            polar = PolarClient(await connect(base), base)
            spec = fault_task("scale-out", sessions=6, turns=3, pause_s=1.0)
            run = await polar.submit(spec)
            result = await polar.wait(run, timeout_s=240)
        finally:
            pids = {node.name: node.pid("worker") for node in nodes}
            gateway_ids = {node.name: _gateway_id(node) for node in nodes}
            for node in nodes:
                node.close()

    assert len(result.sessions) == 6
    for session in result.sessions:
        assert session.status == SessionStatus.COMPLETED, session.error
        assert session.reward == 1.0

    # which worker process ran which activities: identity is "{pid}@{host}"
    by_pid = {str(pid): name for name, pid in pids.items()}
    ran_on: dict[str, set[str]] = {}
    for session in result.sessions:
        for act in await activity_runs(polar.client, session.session_id):
            node = by_pid.get(act.identity.split("@")[0], act.identity)
            ran_on.setdefault(act.activity, set()).add(node)
    assert ran_on["run_harness"] == {"a", "b"}, ran_on
    assert set().union(*ran_on.values()) == {"a", "b"}

    # which gateway recorded which session's calls
    recorded_by: dict[str, set[str]] = {}
    for session in result.sessions:
        records = polar.storage.list_completions(session.session_id)
        assert len(records) == 3
        recorded_by[session.session_id] = {r.gateway_id for r in records}
        assert len(recorded_by[session.session_id]) == 1  # one harness, one gateway
    used = set().union(*recorded_by.values())
    assert used == set(gateway_ids.values()), (used, gateway_ids)


def _gateway_id(node: Node) -> str:
    import httpx

    return httpx.get(f"{node.admin_url}/health", timeout=5).json()["gateway_id"]

"""A compose service's readiness (healthcheck, depends_on) on docker and podman.

examples/harbor-features/slow-service has a `ledger` service that opens its port only 3 s
after it starts, with a healthcheck, and `main` depends on it `service_healthy`: the oracle
reads it once, at once (no retry), and the verifier (in the grading runtime's own fresh
ledger) too. Run as real Polar sessions with the `command` harness: oracle 1, no-op 0 on both
runtimes. A variant whose ledger never opens its port fails prepare as the task's error
(`SidecarNotReady`), naming the service and its last health output, with nothing left.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.runtimes.kinds.sidecar_readiness import SidecarNotReady
from app.adversaries import oracle_command
from polar.client.sdk import PolarClient
from polar.contracts import PrepareRequest
from polar.outcomes import error_outcome
from polar.records import SessionStatus
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.spec import HarnessSpec
from tests.support.container_sessions import (
    docker_runtime,
    podman_runtime,
    runtime_root,
    session_containers,
)
from tests.support.harbor_sessions import harbor_session
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor-features" / "slow-service"
AGENTS = {"oracle": 1.0, "noop": 0.0}


def _images(kind: str, task: Path = TASK) -> None:
    (built,) = ensure_images(task)
    if kind == "podman":  # the worker's podman store (its auto mode)
        from activities.runtimes.kinds.podman import load_from_docker

        load_from_docker(built.image)


@pytest.mark.parametrize("kind", ["docker", "podman"])
@pytest.mark.parametrize("agent", list(AGENTS))
async def test_the_agent_starts_once_the_slow_service_is_healthy(
    polar: PolarClient, podman_image: str, kind: str, agent: str
) -> None:
    _images(kind)
    command = oracle_command(TASK / "solution") if AGENTS[agent] else "true"
    session = await harbor_session(polar, TASK, command, kind, f"ready-{kind}-{agent}")
    assert session.reward == AGENTS[agent], session.evaluation
    assert session_containers(kind, session.session_id) == []


def _never_healthy(tmp_path: Path) -> Path:
    """slow-service whose ledger never opens its port, given up after 2 failed probes."""
    task = Path(shutil.copytree(TASK, tmp_path / "never"))
    compose = task / "environment" / "docker-compose.yaml"
    text = compose.read_text().replace('LEDGER_DELAY: "3"', 'LEDGER_DELAY: "3600"')
    compose.write_text(text.replace("retries: 20", "retries: 2"))
    return task


@pytest.fixture(params=["docker", "podman"])
def runtime(request: pytest.FixtureRequest, podman_image: str) -> Iterator[Any]:
    with runtime_root("polar-ready-") as root:
        if request.param == "docker":
            yield from docker_runtime(root)
        else:
            from activities.runtimes.kinds.podman import resolve_mode

            yield from podman_runtime(root, resolve_mode()[0])  # the worker's own mode


async def test_a_service_never_healthy_fails_prepare_naming_it(
    runtime: Any, tmp_path: Path
) -> None:
    task = _never_healthy(tmp_path)
    _images(runtime.kind, task)
    (spec,) = load_harbor_tasks(task)
    session_id = f"never-{uuid.uuid4().hex[:6]}"
    request = PrepareRequest(
        session_id=session_id,
        task_id="t",
        runtime=spec.runtime.model_copy(update={"kind": runtime.kind}),
        source=None,
    )
    with pytest.raises(SidecarNotReady) as refused:
        await runtime.prepare(request)
    message = str(refused.value)
    print(f"{runtime.kind}: {message}")
    assert message.startswith("sidecar ledger is unhealthy"), message
    assert "last health check: exit 1:" in message and "python3.11/" in message  # the probe's
    if runtime.kind == "docker":  # traceback; podman keeps its first 500 bytes only
        assert "Connection refused" in message
    assert error_outcome("SidecarNotReady", "prepare").outcome == "task_error"
    assert session_containers(runtime, session_id) == []


async def test_the_session_ends_as_a_task_error(
    polar: PolarClient, podman_image: str, tmp_path: Path
) -> None:
    """Through the worker: `task_error` (never retried as infra), the service named."""
    task = _never_healthy(tmp_path)
    _images("docker", task)
    command = HarnessSpec(kind="command", command="true")
    (spec,) = load_harbor_tasks(task, harness=command)
    spec = spec.model_copy(update={"task_id": f"never-{uuid.uuid4().hex[:6]}"})
    (session,) = (await polar.wait(await polar.submit(spec), timeout_s=300)).sessions
    assert session.status == SessionStatus.ERROR, session
    assert session.error_type == "SidecarNotReady" and session.outcome is not None
    assert session.outcome.outcome == "task_error"
    assert session.error is not None and "sidecar ledger is unhealthy" in session.error
    assert session_containers("docker", session.session_id) == []

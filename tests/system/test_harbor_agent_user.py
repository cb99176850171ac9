"""Harbor's `[agent].user` honoured: the harness runs as the task's user, on docker and podman.

The bundled `agent-user` task (examples/harbor) names `agent` (uid 1234, made by its
Dockerfile) as its agent user; its oracle writes `id -un` into the workspace and its test.sh
(run as root) gives 1 only for `agent`. Run as real Polar sessions through Temporal with the
`command` harness (the oracle, and a no-op), on docker and on podman (the worker's `auto`
mode): oracle 1, no-op 0. Underneath, the runtime itself (every podman mode here): the
harness's command runs as the user while prepare actions and other commands keep the
image's root; its HOME and scratch are its own to write and come back to the worker; what it
detached dies at its exit (the exit sweep, run as that user); a user the image lacks is
refused at prepare, naming it; the local runtime refuses the field.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.runtimes import get_runtime
from activities.runtimes.base import InvalidRuntime
from activities.runtimes.kinds.local import LocalRuntime
from activities.runtimes.kinds.podman import load_from_docker, resolve_mode
from polar.client.sdk import PolarClient
from polar.contracts import PrepareRequest
from polar.records import SessionStatus
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.spec import HarnessSpec, RuntimeSpec, TaskSpec, Timeouts
from tests.support.container_sessions import (
    docker_runtime,
    podman_modes,
    podman_runtime,
    runtime_root,
)
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor" / "agent-user"
KINDS = ["docker", *(f"podman-{mode}" for mode in podman_modes())]


@pytest.fixture(scope="module")
def task(docker_image: str) -> TaskSpec:
    """The task, its image built offline (and in podman's stores: every mode run here)."""
    (built,) = ensure_images(TASK)
    (spec,) = load_harbor_tasks(TASK)
    assert spec.runtime.harness_user == "agent" and spec.runtime.image == built.image
    for mode in {*podman_modes(), resolve_mode()[0]}:
        load_from_docker(built.image, mode)
    return spec


@pytest.fixture(params=KINDS)
def runtime(request: pytest.FixtureRequest, task: TaskSpec) -> Iterator[Any]:
    with runtime_root(f"polar-agent-user-{request.param}-") as root:
        if request.param == "docker":
            yield from docker_runtime(root)
        else:
            yield from podman_runtime(root, request.param.removeprefix("podman-"))


def _request(runtime: Any, task: TaskSpec, sid: str, **change: Any) -> PrepareRequest:
    spec = task.runtime.model_copy(update={"kind": runtime.kind, **change})
    return PrepareRequest(session_id=sid, task_id="t", runtime=spec)


HARNESS = (
    'echo "$(id -un) $(id -u) HOME=$HOME"; echo mine > "$HOME/own.txt"; '
    'echo scratch > "$SCRATCH/out.txt"; '
    "setsid nohup bash -c 'while :; do date +%s%N >> beat; sleep 0.1; done' "
    ">/dev/null 2>&1 & sleep 1"
)


async def test_the_harness_runs_as_the_tasks_user(runtime: Any, task: TaskSpec) -> None:
    sid = f"au-{uuid.uuid4().hex[:8]}"
    handle = await runtime.prepare(_request(runtime, task, sid))
    try:
        assert handle.harness_user == "agent"
        home, scratch = runtime.home(handle), runtime.scratch(handle)
        (home / "config.json").write_text("{}")  # the worker's, before the run (as root)
        env = {"SCRATCH": str(scratch)}
        outcome = await runtime.run(
            handle, HARNESS, env=env, log_name="h", timeout_s=60, user=handle.harness_user
        )
        stdout, stderr = runtime.log_paths(handle, "h")
        assert outcome.exit_code == 0, stderr.read_text()
        assert stdout.read_text().split("\n")[0] == f"agent 1234 HOME={home}"
        assert (home / "own.txt").read_text() == "mine\n"  # its HOME was its own, and came back
        assert (scratch / "out.txt").read_text() == "scratch\n"
        # what it detached died at its exit (the sweep ran as the user); other commands and
        # the image's own user (root) are untouched by the field
        count = "id -un; wc -l < beat"
        first = await runtime.run(handle, count, env={}, log_name="c1", timeout_s=30)
        again = await runtime.run(handle, "sleep 1; " + count, env={}, log_name="c2", timeout_s=30)
        assert first.exit_code == 0 and again.exit_code == 0
        one, two = (runtime.log_paths(handle, n)[0].read_text().split() for n in ("c1", "c2"))
        assert one[0] == "root" and int(one[1]) > 0 and one == two, (one, two)
    finally:
        await runtime.teardown(handle)


async def test_a_user_the_image_lacks_is_refused_at_prepare(runtime: Any, task: TaskSpec) -> None:
    with pytest.raises(InvalidRuntime, match="harness user 'nobody-here'.*not a user of"):
        await runtime.prepare(_request(runtime, task, "au-missing", harness_user="nobody-here"))
    # so is a step's own user (a multi-step task's `[steps.agent].user`)
    request = _request(runtime, task, "au-step-missing").model_copy(
        update={"step_users": ["agent", "step-nobody"]}
    )
    with pytest.raises(InvalidRuntime, match="harness user 'step-nobody'.*not a user of"):
        await runtime.prepare(request)
    # a uid needs no entry in the image (as `docker exec -u 4321` takes it)
    handle = await runtime.prepare(_request(runtime, task, "au-uid", harness_user="4321"))
    try:
        outcome = await runtime.run(
            handle, 'id -u; touch "$HOME/x"', env={}, log_name="u", timeout_s=30, user="4321"
        )
        assert outcome.exit_code == 0
        assert runtime.log_paths(handle, "u")[0].read_text().split() == ["4321"]
    finally:
        await runtime.teardown(handle)


async def test_the_local_runtime_refuses_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="harness_user is for container runtimes"):
        RuntimeSpec(kind="local", harness_user="agent")
    request = PrepareRequest(
        session_id="au-local", task_id="t", runtime=RuntimeSpec(kind="auto", harness_user="agent")
    )
    with pytest.raises(InvalidRuntime, match="harness_user is for container runtimes"):
        await LocalRuntime(tmp_path / "runtimes").prepare(request)
    request = PrepareRequest(
        session_id="au-local", task_id="t", runtime=RuntimeSpec(kind="auto"), step_users=["x"]
    )
    with pytest.raises(InvalidRuntime, match="harness_user is for container runtimes"):
        await LocalRuntime(tmp_path / "runtimes").prepare(request)


@pytest.mark.parametrize("kind", ["docker", "podman"])
async def test_sessions_oracle_1_no_op_0(kind: str, polar: PolarClient, task: TaskSpec) -> None:
    """Real sessions through Temporal: the oracle (solve.sh, by the `command` harness) as
    `agent` scores 1, a no-op 0; each ran its harness (the started marker was seen)."""
    solve = (TASK / "solution" / "solve.sh").read_text()
    rt = get_runtime(kind, Path(polar.settings.data_dir))
    print(f"{kind}: {getattr(rt, 'mode', '')}")

    def probe(name: str, command: str) -> TaskSpec:
        return task.model_copy(
            update={
                "task_id": f"au-{kind}-{name}-{uuid.uuid4().hex[:6]}",
                "runtime": task.runtime.model_copy(update={"kind": kind}),
                "harness": HarnessSpec(kind="command", command=command),
                "timeouts": Timeouts(harness_s=120, evaluate_s=300, max_attempts=1),
            }
        )

    for name, command, reward in (("oracle", solve, 1.0), ("noop", "true", 0.0)):
        result = await polar.wait(await polar.submit(probe(name, command)), timeout_s=400)
        (session,) = result.sessions
        assert session.status == SessionStatus.COMPLETED, session.error
        assert session.reward == reward, (name, session.evaluation)

"""GPU sessions on the real stack: refused at submit where no worker declares the GPUs, placed
only on a worker that does.

A Temporal dev server, SeaweedFS and two workers in this process on a task queue of the
test's own: `cpu-…` serves every queue and declares no GPU; `gpu-…` serves the stage pools
and declares one `NVIDIA H100 80GB HBM3` (POLAR_GPUS=1, POLAR_GPU_TYPES), which it
advertises on the deployment's GPU queue (polar/gpus.py). With only the first running, a
task asking for a GPU is refused by `PolarClient.submit`, naming why (and by `polar submit`,
exit 2); with both, a task asking for another type or more GPUs than declared is refused
naming what is declared, and one asking for an H100 runs: its prepare goes to the GPU
host's own init queue (read back from the session's workflow history), never to the shared
one.

One more: a worker that declares GPUs but never starts the prepare sent to its host is
probed, found silent and passed over for the next pick.

This host has no GPU. So the session runs under a runtime kind of the test's own that takes
its GPU spec, notes which host prepared it, and prepares the `local` runtime without the
GPUs (what follows runs in that local runtime as any session's); the container engines'
GPU arguments are checked on their own (tests/unit/activities/runtimes/test_gpu_devices.py,
and each engine here refusing them in tests/system/test_gpu_devices.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from typer.testing import CliRunner

from activities.runtimes import RUNTIMES, RuntimePlace
from activities.runtimes.kinds.local import LocalRuntime
from activities.worker import gpu_worker, running_workers
from app.cli import app
from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.gpus import NoGpuWorkers, gpu_offers
from polar.records import SessionStatus
from polar.settings import Settings, get_settings
from polar.tasks.spec import TaskSpec

KIND = "gpu-test"
H100 = "NVIDIA H100 80GB HBM3"
PREPARED: list[tuple[str, str, int, list[str]]] = []
"""(host, session, gpus, gpu types) of each prepare the test's runtime kind made."""


class GpuNotingRuntime(LocalRuntime):
    """The local runtime under the test's kind: notes the GPU session it is asked to prepare
    and the host, then prepares it without GPUs (there are none here); its handle is a
    `local` one, so every later stage runs in the plain local runtime."""

    kind = KIND

    async def prepare(self, request: PrepareRequest) -> RuntimeHandle:
        spec = request.runtime
        PREPARED.append((self.host_id, request.session_id, spec.gpus, list(spec.gpu_types)))
        plain = spec.model_copy(update={"kind": "local", "gpus": 0, "gpu_types": []})
        return await super().prepare(request.model_copy(update={"runtime": plain}))


def _make(root: Path, place: RuntimePlace) -> GpuNotingRuntime:
    return GpuNotingRuntime(root, host_id=place.host_id, settings=place.settings)


@pytest.fixture
def gpu_kind() -> Iterator[None]:
    RUNTIMES.register(KIND, _make)
    try:
        yield
    finally:
        RUNTIMES.unregister(KIND)


def _task(tmp_path: Path, task_id: str, gpus: int, types: list[str]) -> TaskSpec:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "README").write_text("gpu test\n")
    reward = (
        '[ "$POLAR_COMMAND_EXIT_CODE" = 0 ] && r=1.0 || r=0.0; '
        'echo "{\\"reward\\": $r}" > "$POLAR_REWARD_FILE"'
    )
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "source": {"type": "dir", "path": str(repo)},
            "runtime": {"kind": KIND, "gpus": gpus, "gpu_types": types},
            "harness": {"kind": "command", "command": "echo ran > ran.txt"},
            "evaluator": {
                "kind": "command",
                "command": "test -f ran.txt",
                "reward_command": reward,
            },
            "timeouts": {"max_attempts": 1},
        }
    )


async def _offered(settings: Settings, host: str, timeout_s: float = 60.0) -> None:
    """Until the GPU queue's pollers show `host`'s offer (its worker has polled)."""
    polar = await PolarClient.connect(settings)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        offers = await gpu_offers(polar.client, settings.temporal_namespace, settings.task_queue)
        if any(o.host == host for o in offers):
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{host} never showed on the GPU queue")


def _cli(args: list[str], settings: Settings) -> Any:
    try:
        return CliRunner().invoke(app, args, env=settings.as_env(), catch_exceptions=False)
    finally:
        get_settings.cache_clear()


async def _prepare_queues(polar: PolarClient, session_id: str) -> list[str]:
    """The task queues the session's workflow sent `prepare_runtime` to."""
    queues = []
    history = await polar.client.get_workflow_handle(session_id).fetch_history()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "prepare_runtime":
                queues.append(attrs.task_queue.name)
    return queues


async def test_gpu_tasks_are_refused_without_a_gpu_worker_and_placed_on_one(
    devstack: DevStack, gpu_kind: None, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    queue = f"polar-gpu-{suffix}"
    cpu = devstack.settings.model_copy(update={"task_queue": queue, "host_id": f"cpu-{suffix}"})
    gpu = cpu.model_copy(update={"host_id": f"gpu-{suffix}", "gpus": 1, "gpu_types": [H100]})
    polar = await PolarClient.connect(cpu)
    PREPARED.clear()
    async with running_workers(cpu):
        with pytest.raises(NoGpuWorkers, match="asks for 1 GPU of type H100, and no worker"):
            await polar.submit(_task(tmp_path, f"gpu-none-{suffix}", 1, ["H100"]))
        # `polar submit` says it and exits 2 (invalid input), before anything starts
        spec_file = tmp_path / "gpu-task.json"
        spec = _task(tmp_path, f"gpu-cli-{suffix}", 2, []).model_copy(deep=True)
        spec.runtime.kind = "docker"
        spec_file.write_text(spec.model_dump_json())
        result = await asyncio.to_thread(_cli, ["submit", str(spec_file), "--no-wait"], cpu)
        assert result.exit_code == 2, result.output
        assert "refused: task gpu-cli" in result.output and "asks for 2 GPUs" in result.output
        async with running_workers(gpu, ("init", "run", "postrun")):
            await _offered(cpu, gpu.host_id)
            declared = f"declared: gpu-{suffix}: 1 × {H100}"
            for gpus, types in ((1, ["A100"]), (2, [])):
                with pytest.raises(NoGpuWorkers, match=declared):
                    await polar.submit(_task(tmp_path, f"gpu-misfit-{suffix}", gpus, types))
            run = await polar.submit(_task(tmp_path, f"gpu-h100-{suffix}", 1, ["h100"]))
            result = await polar.wait(run, timeout_s=300)
    (session,) = result.sessions
    assert session.status == SessionStatus.COMPLETED and session.reward == 1.0, session
    # the session's runtime and its evaluator's fresh ones (with the GPUs too: a verifier may
    # need them), all on the GPU host
    print(PREPARED)
    assert PREPARED[0] == (gpu.host_id, session.session_id, 1, ["h100"])
    assert {(host, gpus) for host, _, gpus, _ in PREPARED} == {(gpu.host_id, 1)}
    assert await _prepare_queues(polar, session.session_id) == [f"{queue}-host-{gpu.host_id}-init"]


@activity.defn(name="host_alive")
async def _ghost_alive() -> str:
    return "ghost"


async def test_a_declaring_host_that_never_prepares_is_passed_over(
    devstack: DevStack, gpu_kind: None, tmp_path: Path
) -> None:
    """A worker that declares an H100 on the GPU queue but serves none of its host's queues
    (gone but still listed, or wedged) gets the first pick while it is the only one: its
    prepare is not started within the host wait, its probe is not answered, and the session
    is placed on the real GPU host that came up meanwhile."""
    suffix = uuid.uuid4().hex[:6]
    queue = f"polar-gpu-{suffix}"
    cpu = devstack.settings.model_copy(update={"task_queue": queue, "host_id": f"cpu-{suffix}"})
    gpu = cpu.model_copy(update={"host_id": f"gpu-{suffix}", "gpus": 1, "gpu_types": [H100]})
    ghost = gpu.model_copy(update={"host_id": f"ghost-{suffix}"})
    polar = await PolarClient.connect(cpu)
    task = _task(tmp_path, f"gpu-ghost-{suffix}", 1, [])
    # the ghost's host wait: the real GPU worker starts meanwhile (on a loaded machine a pick
    # may still miss it, and pass over the ghost again)
    task.timeouts.host_wait_s, task.timeouts.heartbeat_s = 10.0, 2.0
    task.timeouts.max_attempts = 2
    PREPARED.clear()
    async with running_workers(cpu), gpu_worker(polar.client, ghost, [_ghost_alive]):
        await _offered(cpu, ghost.host_id)
        run = await polar.submit(task)
        await asyncio.sleep(2)  # the first pick is made: the ghost, the only one declared
        async with running_workers(gpu, ("init", "run", "postrun")):
            result = await polar.wait(run, timeout_s=300)
    (session,) = result.sessions
    assert session.status == SessionStatus.COMPLETED and session.reward == 1.0, session
    assert {host for host, *_ in PREPARED} == {gpu.host_id}
    # the ghost first, then the real host (under load the real worker may not be offered on
    # the GPU queue by the ghost's second pick: the ghost is then passed over once more)
    *passed, placed = await _prepare_queues(polar, session.session_id)
    assert passed and set(passed) == {f"{queue}-host-{ghost.host_id}-init"}, passed
    assert placed == f"{queue}-host-{gpu.host_id}-init"

"""A GPU session's devices reach the real engines: docker and podman here (a host with no GPU,
no NVIDIA container runtime and no CDI spec) refuse the container for want of them, each
naming the device it was asked for. The arguments themselves are checked in
tests/unit/activities/runtimes/test_gpu_devices.py; a container actually getting a GPU
needs a GPU host, which this suite does not have (docs/runtimes.md, GPUs)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from docker.errors import APIError

from polar.contracts import PrepareRequest
from polar.tasks.spec import RuntimeSpec
from tests.support.container_sessions import (
    docker_runtime,
    podman_modes,
    podman_runtime,
    runtime_root,
)

pytestmark = pytest.mark.slow

REFUSALS = {
    "docker": r'could not select device driver "nvidia" with capabilities: \[\[gpu\]\]',
    "podman": r"unresolvable CDI devices nvidia\.com/gpu=0",
}


@pytest.fixture(params=["docker", *(f"podman-{mode}" for mode in podman_modes())])
def runtime(request: pytest.FixtureRequest) -> Iterator[Any]:
    if shutil.which("nvidia-smi"):
        pytest.skip("this host has NVIDIA GPUs: the refusal shown here is a GPU-less host's")
    with runtime_root(f"polar-gpu-{request.param}-") as root:
        if request.param == "docker":
            request.getfixturevalue("docker_image")
            yield from docker_runtime(root)
        else:
            request.getfixturevalue("podman_image")
            yield from podman_runtime(root, request.param.removeprefix("podman-"))


async def test_an_engine_without_gpus_refuses_a_gpu_session(runtime: Any) -> None:
    spec = RuntimeSpec(kind=runtime.kind, gpus=1)
    request = PrepareRequest(session_id="gpu-1", task_id="t", runtime=spec)
    with pytest.raises(APIError, match=REFUSALS[runtime.kind]):
        await runtime.prepare(request)
    # the same runtime without GPUs starts (the refusal was the GPUs', nothing else)
    plain = request.model_copy(update={"runtime": RuntimeSpec(kind=runtime.kind)})
    handle = await runtime.prepare(plain)
    await runtime.teardown(handle)

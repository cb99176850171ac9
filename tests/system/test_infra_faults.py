"""Infrastructure faults keep their cause (issue 22): each made to happen for real.

The prepare-time checks against a real Docker engine: a missing image and an
image that lacks what the sandbox needs are refused at prepare (`RuntimeUnfit`,
outcome `infra_error`: image), each missing tool named, never a harness exit 97.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from activities.runtimes.base import RuntimeUnfit
from activities.runtimes.docker import LABEL, DockerRuntime
from polar.contracts import PrepareRequest
from polar.outcomes import error_outcome
from polar.records import InfraReason
from polar.tasks.spec import RuntimeSpec

pytestmark = pytest.mark.slow

BASE_IMAGE = "polar/base:bookworm"
"""The debootstrap minbase every Polar image is built on: bash and setsid, no git, no python3."""


@pytest.fixture
def runtime(docker_image: str, tmp_path: Path) -> Iterator[DockerRuntime]:
    rt = DockerRuntime(tmp_path / "runtimes")
    yield rt
    client = docker.from_env()
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        if container.name.startswith(rt.container_name("")):
            container.remove(force=True)


def _request(session_id: str, image: str) -> PrepareRequest:
    return PrepareRequest(
        session_id=session_id,
        task_id="t",
        runtime=RuntimeSpec.model_validate({"kind": "docker", "image": image}),
    )


async def test_an_image_without_the_sandbox_tools_is_refused_at_prepare(
    runtime: DockerRuntime,
) -> None:
    with pytest.raises(RuntimeUnfit) as refused:
        await runtime.prepare(_request("unfit-1", BASE_IMAGE))
    message = str(refused.value)
    assert f"docker image {BASE_IMAGE!r} lacks what the sandbox needs: git, python3 " in message
    assert "bash" not in message.split(":")[1]  # what it has is not named as missing
    # nothing of the refused runtime is left behind
    assert docker.from_env().containers.list(all=True, filters={"label": f"{LABEL}=unfit-1"}) == []
    outcome = error_outcome(type(refused.value).__name__, "prepare")
    assert outcome.reason == InfraReason.IMAGE


async def test_a_missing_image_is_an_image_fault(runtime: DockerRuntime) -> None:
    with pytest.raises(RuntimeUnfit, match="not found"):
        await runtime.prepare(_request("unfit-2", "polar/no-such-image:1"))


async def test_the_default_image_has_everything(runtime: DockerRuntime, docker_image: str) -> None:
    handle = await runtime.prepare(_request("fit-1", docker_image))
    await runtime.teardown(handle)

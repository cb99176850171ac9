"""Infrastructure faults keep their cause (issue 22): each made to happen for real.

The prepare-time checks against a real Docker engine (and podman's store): a missing image
is the task's error (`ImageMissing`, outcome `task_error`: not retried), naming the image and
how to provide it; an image that lacks what the sandbox needs is refused at prepare
(`RuntimeUnfit`, outcome `infra_error`: image), each missing tool named, never a harness
exit 97.
A container gone before the harness ran leaves no started marker (`sandbox_start`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import NotFound

from activities.runtimes import started_marker
from activities.runtimes.base import ImageMissing, RuntimeUnfit
from activities.runtimes.kinds.docker import LABEL, DockerRuntime
from activities.runtimes.kinds.podman import PodmanRuntime
from polar.contracts import PrepareRequest, SessionResult
from polar.outcomes import error_outcome
from polar.records import InfraReason, SessionStatus
from polar.tasks.spec import RuntimeSpec
from tests.support.eval_runtimes import prepare_session
from tests.support.stock_images import stock_images

pytestmark = pytest.mark.slow

SESSIONS = ("unfit-1", "unfit-2", "fit-0", "fit-1", "marker-1")
BASE_IMAGE = "polar/base:bookworm"
"""The debootstrap minbase every Polar image is built on: a shell, no git, no python3."""


@pytest.fixture
def runtime(docker_image: str, tmp_path: Path) -> Iterator[DockerRuntime]:
    rt = DockerRuntime(tmp_path / "runtimes")
    yield rt
    client = docker.from_env()
    for session_id in SESSIONS:  # only this module's: other tests share the engine
        with contextlib.suppress(NotFound):
            client.containers.get(rt.container_name(session_id)).remove(force=True)


def _request(session_id: str, image: str, kind: str = "docker") -> PrepareRequest:
    return PrepareRequest(
        session_id=session_id,
        task_id="t",
        runtime=RuntimeSpec.model_validate({"kind": kind, "image": image}),
    )


async def test_an_image_without_a_shell_is_refused_at_prepare_and_one_without_git_is_not(
    runtime: DockerRuntime,
) -> None:
    """The sandbox brings its own tools (activities/runtimes/toolbox.py): an image needs only
    a shell. The debootstrap minbase (no git, no python3) prepares; an image with no shell at
    all is refused at prepare as an infra error of class `image`, nothing left behind."""
    spec = RuntimeSpec(kind="docker", image=BASE_IMAGE)
    handle = await prepare_session(runtime, spec, None, "fit-0")
    assert handle.baseline  # the worker's git made it, with no git in the image
    await runtime.teardown(handle)
    no_shell = stock_images()["noshell"]
    with pytest.raises(RuntimeUnfit) as refused:
        await runtime.prepare(_request("unfit-1", no_shell))
    assert f"{no_shell!r} has no shell" in str(refused.value)
    # nothing of the refused runtime is left behind
    assert docker.from_env().containers.list(all=True, filters={"label": f"{LABEL}=unfit-1"}) == []
    outcome = error_outcome(type(refused.value).__name__, "prepare")
    assert outcome.reason == InfraReason.IMAGE


async def test_a_missing_image_is_the_tasks_error_naming_how_to_provide_it(
    runtime: DockerRuntime,
) -> None:
    """Issue 37: said once, as a task error, not the engine's 404 retried as an infra one."""
    with pytest.raises(ImageMissing) as refused:
        await runtime.prepare(_request("unfit-2", "polar/no-such-image:1"))
    message = str(refused.value)
    assert "docker image 'polar/no-such-image:1' is not on this worker" in message
    assert "infra/images/build.py" in message and "docs/runtimes.md#images" in message
    assert refused.value.__cause__ is None and "404" not in message
    assert error_outcome(type(refused.value).__name__, "prepare").outcome == "task_error"


async def test_a_missing_podman_image_is_the_tasks_error(tmp_path: Path) -> None:
    """The podman kind alike (its own store; no Docker engine needed)."""
    runtime = PodmanRuntime(tmp_path / "podman")
    with pytest.raises(ImageMissing) as refused:
        await runtime.prepare(_request("unfit-3", "polar/no-such-image:1", kind="podman"))
    message = str(refused.value)
    assert "podman image 'polar/no-such-image:1' is not on this worker" in message
    assert "activities.runtimes.kinds.podman load polar/no-such-image:1" in message


async def test_the_default_image_has_everything(runtime: DockerRuntime, docker_image: str) -> None:
    handle = await runtime.prepare(_request("fit-1", docker_image))
    await runtime.teardown(handle)


async def test_a_container_that_is_gone_before_the_harness_leaves_no_marker(
    runtime: DockerRuntime, docker_image: str
) -> None:
    """The sandbox did not start the harness (its container stopped under it, as an engine
    restart or the wall-clock deadline does): the run fails without the started marker, so
    the session is `infra_error` (sandbox_start), not the policy's timeout or failure. The
    same command in a live container leaves the marker."""
    handle = await runtime.prepare(_request("marker-1", docker_image))
    try:
        live = started_marker.new_nonce()
        command = started_marker.with_marker("exit 3", live)
        outcome = await runtime.run(handle, command, env={}, log_name="live", timeout_s=60)
        assert outcome.exit_code == 3
        assert started_marker.seen(runtime.log_paths(handle, "live")[1], live)

        docker.from_env().containers.get(runtime.container_name("marker-1")).stop(timeout=0)
        gone = started_marker.new_nonce()
        command = started_marker.with_marker("exit 0", gone)
        outcome = await runtime.run(handle, command, env={}, log_name="gone", timeout_s=60)
        assert outcome.exit_code != 0
        assert not started_marker.seen(runtime.log_paths(handle, "gone")[1], gone)
        session = SessionResult(
            session_id="marker-1",
            task_id="t",
            index=0,
            status=SessionStatus.TIMEOUT if outcome.timed_out else SessionStatus.HARNESS_FAILED,
            harness="command",
            harness_started=False,
        )
        assert session.outcome is not None
        assert session.outcome.reason == InfraReason.SANDBOX_START
    finally:
        await runtime.teardown(handle)

"""A task's image needs nothing of Polar's: Harbor tasks on stock images, as real sessions.

The sandbox brings its own tools (activities/runtimes/toolbox.py: a static busybox, bash and
helper, mounted read-only in every container) and the worker's own git makes the workspace's
baseline and carries the session's changes (activities/evaluators/worker_git.py). So the
bundled `stock-image` task (examples/harbor: `FROM ubuntu:24.04`, mapped through its image
map) runs and grades, with the `command` harness, on images made offline here
(tests/support/stock_images.py): the debootstrapped Debian with no python3 and no git, and a
busybox-only root file system (musl-like: no libc, no bash; Alpine itself cannot be had
offline). Its test.sh is bash, which the busybox image lacks: Polar's toolbox gives it. The
oracle (solve.sh) scores 1 and a no-op 0, on docker and on podman. An image with no shell at
all is refused at load (the task and its field named) and at prepare (the image named).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from activities.runtimes.base import RuntimeUnfit
from activities.runtimes.kinds.docker import DockerRuntime
from activities.runtimes.kinds.podman import PodmanRuntime
from app.adversaries import oracle_command
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from polar.tasks.harbor_toml import HarborTaskError
from polar.tasks.spec import HarnessSpec, TaskSpec
from tests.support.container_sessions import runtime_root
from tests.support.eval_runtimes import prepare_session
from tests.support.paths import REPO
from tests.support.stock_images import in_podman, stock_images, task_with_image

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor" / "stock-image"


def _spec(task: Path, kind: str) -> TaskSpec:
    (built,) = ensure_images(task)
    if kind == "podman":
        in_podman(built.image)
    (spec,) = load_harbor_tasks(task)
    assert spec.runtime.image == built.image
    return spec.model_copy(update={"runtime": spec.runtime.model_copy(update={"kind": kind})})


@pytest.mark.parametrize("kind", ["docker", "podman"])
@pytest.mark.parametrize("image", ["debian", "busybox"])
async def test_a_harbor_task_runs_and_grades_on_a_stock_image(
    kind: str, image: str, polar: PolarClient, docker_image: str, tmp_path: Path
) -> None:
    images = stock_images()
    task = task_with_image(TASK, tmp_path / "stock-image", images[image])
    spec = _spec(task, kind)
    runs = {"oracle": oracle_command(task / "solution"), "noop": "true"}
    started = time.monotonic()
    submitted = [
        spec.model_copy(
            update={
                "task_id": f"stock-{image}-{kind}-{name}",
                "harness": HarnessSpec(kind="command", command=command),
            }
        )
        for name, command in runs.items()
    ]
    results = await asyncio.gather(
        *[polar.wait(await polar.submit(s), timeout_s=300) for s in submitted]
    )
    rewards = {}
    for name, result in zip(runs, results, strict=True):
        (session,) = result.sessions
        assert session.status == SessionStatus.COMPLETED, (name, session.error)
        rewards[name] = session.reward
    print(f"{image} on {kind}: {rewards} in {time.monotonic() - started:.1f}s")
    assert rewards == {"oracle": 1.0, "noop": 0.0}


async def test_a_verifier_user_on_a_busybox_image(
    polar: PolarClient, docker_image: str, tmp_path: Path
) -> None:
    """`[verifier].user`: test.sh runs as that user where the image's setpriv cannot switch
    users (busybox's): the toolbox's helper does. The copy's test.sh scores only as nobody."""
    images = stock_images()
    task = task_with_image(TASK, tmp_path / "stock-image", images["busybox"])
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nuser = "nobody"\n'))
    test_sh = task / "tests" / "test.sh"
    test_sh.write_text(
        test_sh.read_text().replace(
            '"$got" == "$expected"', '"$got" == "$expected" && $UID == 65534'
        )
    )
    spec = _spec(task, "docker")
    assert spec.evaluator.kind == "harbor"
    oracle = spec.model_copy(
        update={
            "task_id": "stock-busybox-nobody",
            "harness": HarnessSpec(kind="command", command=oracle_command(task / "solution")),
        }
    )
    (session,) = (await polar.wait(await polar.submit(oracle), timeout_s=300)).sessions
    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.reward == 1.0, session.evaluation


def test_an_image_without_a_shell_is_refused_at_load_naming_it(
    docker_image: str, tmp_path: Path
) -> None:
    """The task's environment builds (no RUN step), then the load refuses it, and again when
    the image is cached."""
    images = stock_images()
    task = task_with_image(TASK, tmp_path / "stock-image", images["noshell"])
    for _ in range(2):
        with pytest.raises(HarborTaskError, match=r"has no shell \(/bin/sh is missing\)") as info:
            ensure_images(task)
        assert "polar/stock-image" in str(info.value)
        assert "environment/Dockerfile" in str(info.value)


@pytest.mark.parametrize("kind", ["docker", "podman"])
async def test_an_image_without_a_shell_is_refused_at_prepare_naming_it(
    kind: str, docker_image: str
) -> None:
    images = stock_images()
    with runtime_root("polar-noshell-") as root:
        if kind == "podman":
            in_podman(images["noshell"])
            runtime: DockerRuntime = PodmanRuntime(root)
        else:
            runtime = DockerRuntime(root)
        spec = TaskSpec.model_validate(
            {
                "task_id": "noshell",
                "runtime": {"kind": kind, "image": images["noshell"]},
                "harness": {"kind": "command", "command": "true"},
                "evaluator": {"kind": "command", "command": "true"},
            }
        ).runtime
        with pytest.raises(RuntimeUnfit, match=r"'polar/stock:noshell' has no shell"):
            await prepare_session(runtime, spec, None, f"noshell-{kind}")
        # the refused prepare removed its container (runtime_root removes the dirs)
        assert await runtime.list_sessions() <= {f"noshell-{kind}"}

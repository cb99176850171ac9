"""Harbor's separate verifier as real Polar sessions.

examples/harbor-features/separate-verifier: `[verifier.environment]` makes the verifier
Harbor's `separate` one, its image built from tests/Dockerfile (the expected answer baked in
there only). The agent's answer, `/workspace/answer.txt`, is a declared artifact: collected
after the agent and put back at its path in the verifier's own container, which gets nothing
else of the session's workspace. The oracle scores 1 and a no-op 0, on docker and podman. An
agent that writes a wrong answer and plants `/workspace/grader.env` (which the naive test.sh
sources if it is there) scores 0: the planted file never reaches the verifier. The same task
with the verifier in the task's own environment (Harbor's default, `shared`) gets the
session's changes, so there the plant scores 1: the difference the mode makes. With a
tests/docker-compose.yaml beside tests/Dockerfile the verifier runs with its own services
(the expected answer served by one of them, on docker and podman), none of the agent's.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from app.adversaries import oracle_command
from polar.client.sdk import PolarClient
from polar.contracts import SessionResult
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_images import ensure_images
from tests.support.harbor_sessions import harbor_session
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor-features" / "separate-verifier"
PLANT = "echo 41 > answer.txt && echo PASS_ANYWAY=1 > grader.env"
COMPOSE = """services:
  main:
    environment:
      ANSWERS_URL: http://answers:8000/expected.txt
  answers:
    image: polar/runtime:py311
    working_dir: /srv
    command: ["sh", "-c", "echo 42 > expected.txt && exec python3 -m http.server 8000"]
"""
SERVED_TEST = """#!/bin/bash
get="import os, urllib.request as u; print(u.urlopen(os.environ['ANSWERS_URL'], timeout=5).read())"
expected=$(python3 -c "$get" | tr -dc 0-9)
if [ -n "$expected" ] && [ "$(cat /workspace/answer.txt 2>/dev/null)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def _verifier_image(task: Path) -> str:
    (spec,) = load_harbor_tasks(task)
    return str((spec.evaluator.harbor or {})["image"])


async def _session(
    polar: PolarClient, task: Path, command: str, kind: str, name: str
) -> SessionResult:
    return await harbor_session(polar, task, command, kind, f"separate-{name}")


async def test_the_separate_verifier_grades_the_artifact_and_never_the_workspace(
    polar: PolarClient, podman_image: str, tmp_path: Path
) -> None:
    from activities.runtimes.kinds.podman import load_from_docker

    built = ensure_images(TASK)
    (spec,) = load_harbor_tasks(TASK)
    verifier_image = _verifier_image(TASK)
    assert verifier_image != spec.runtime.image
    for image in (built[0].image, verifier_image):  # the worker's podman gets both
        load_from_docker(image)
    shared = Path(shutil.copytree(TASK, tmp_path / "shared"))
    toml = shared / "task.toml"  # the verifier in the task's own environment: Harbor's default
    text = toml.read_text()
    toml.write_text(
        text[: text.index("[verifier.environment]")] + text[text.index("[environment]") :]
    )
    (shared / "tests" / "Dockerfile").unlink()
    ensure_images(shared)
    # the verifier's own compose services: the expected answer served by one of them
    served = Path(shutil.copytree(TASK, tmp_path / "served"))
    (served / "tests" / "Dockerfile").write_text("FROM polar/runtime:py311\nCOPY . /tests\n")
    (served / "tests" / "docker-compose.yaml").write_text(COMPOSE)
    (served / "tests" / "test.sh").write_text(SERVED_TEST)
    for image in ensure_images(served)[0].image, _verifier_image(served):
        load_from_docker(image)
    oracle = oracle_command(TASK / "solution")
    got = await asyncio.gather(
        _session(polar, TASK, oracle, "docker", "oracle"),
        _session(polar, TASK, "true", "docker", "noop"),
        _session(polar, TASK, PLANT, "docker", "plant"),
        _session(polar, TASK, oracle, "podman", "podman-oracle"),
        _session(polar, TASK, "true", "podman", "podman-noop"),
        _session(polar, shared, PLANT, "docker", "shared-plant"),
        _session(polar, served, oracle, "docker", "served-oracle"),
        _session(polar, served, oracle, "podman", "served-podman-oracle"),
        _session(polar, served, "true", "docker", "served-noop"),
    )
    rewards = [s.reward for s in got]
    assert rewards == [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0], [s.evaluation for s in got]

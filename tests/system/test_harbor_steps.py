"""A multi-step Harbor task (`[[steps]]`) run as real Polar sessions, on docker and podman.

examples/harbor-features/two-step-notes has two steps: `write` (min_reward 1) and `extend`,
whose `workdir/` brings a `setup.sh` that writes `seed.txt` before its agent runs and whose
tests/ lie over the task's shared tests/. The `command` harness plays the agent, told each
step by `POLAR_STEP`. Every step is graded in a fresh container by its own test.sh, every
step's reward is kept, and the session's is Harbor's `mean` over the steps run:

* the oracle (each step's solution/solve.sh, as `polar tasks audit` runs it) solves both
  steps: 1 and 1, reward 1;
* a no-op scores 0 at `write`, below its min_reward: `extend` is never run, reward 0;
* an agent that solves only `write` is run on and scores 0 at `extend`: reward 0.5.

examples/harbor-features/step-users runs its first step's agent as the task's `[agent].user`
(alice) and its second's as the step's own `[steps.agent].user` (bob); each step's test.sh
checks what `id -un` said where its agent ran: the oracle scores 1 and 1, a no-op 0 and 0.
A first step run as root that deletes bob from the image's users leaves the second step
nobody to run as: the session's doing, so that step scores 0 (not a task error).
(The changes reach the verifier as a diff applied as the task's user: a file's owner is not
carried, so a test.sh cannot tell which step's user wrote a file by its owner.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.adversaries import steps_oracle_command
from polar.client.sdk import PolarClient
from polar.records import OutcomeClass, SessionStatus
from polar.storage import Storage, artifact_key
from polar.tasks.harbor_images import ensure_images
from tests.support.harbor_sessions import harbor_session
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

TASK = REPO / "examples" / "harbor-features" / "two-step-notes"
USERS_TASK = REPO / "examples" / "harbor-features" / "step-users"
ORACLE = steps_oracle_command(TASK, ["write", "extend"])
"""Each step's own solution/solve.sh at its step, as the audit's oracle runs them."""
AGENTS = {  # command, step rewards, session reward
    "oracle": (ORACLE or "", [1.0, 1.0], 1.0),
    "noop": ("true", [0.0], 0.0),
    "first-only": ('[ "$POLAR_STEP" = write ] && echo one > notes.txt; true', [1.0, 0.0], 0.5),
}


@pytest.mark.parametrize("kind", ["docker", "podman"])
@pytest.mark.parametrize("agent", list(AGENTS))
async def test_each_step_is_run_graded_and_kept(
    polar: PolarClient, storage: Storage, docker_image: str, kind: str, agent: str
) -> None:
    _build(TASK, kind)
    command, step_rewards, reward = AGENTS[agent]
    session = await harbor_session(polar, TASK, command, kind, f"steps-{kind}-{agent}", 600)
    assert [s.name for s in session.steps] == ["write", "extend"][: len(step_rewards)]
    assert [s.reward for s in session.steps] == step_rewards, session.steps
    assert session.reward == pytest.approx(reward)
    if agent == "noop":
        assert session.steps[0].stopped == "reward=0.0 below min_reward 1.0"
    # each step's grade is kept apart, under steps/{name}/
    for step in session.steps:
        key = artifact_key(session.session_id, f"steps/{step.name}/harbor-report.json")
        report = json.loads(storage.get_bytes(key))
        assert report["reward"] == step.reward
        assert session.artifacts[f"steps/{step.name}/evaluation.report"] == key
    if agent == "oracle":
        report = json.loads(
            storage.get_bytes(artifact_key(session.session_id, "steps/extend/harbor-report.json"))
        )
        # the step's workdir was put in the workspace and its setup.sh run there before its
        # agent (as Harbor does): its files are changes like the agent's
        files = ["README.step.md", "notes.txt", "seed.txt", "setup.sh"]
        assert sorted(report["patch_files"]) == files


@pytest.mark.parametrize("kind", ["docker", "podman"])
@pytest.mark.parametrize("agent", ["oracle", "noop"])
async def test_each_steps_agent_runs_as_its_own_user(
    polar: PolarClient, docker_image: str, kind: str, agent: str
) -> None:
    _build(USERS_TASK, kind)
    oracle = steps_oracle_command(USERS_TASK, ["first", "second"]) or ""
    command = oracle if agent == "oracle" else "true"
    session = await harbor_session(polar, USERS_TASK, command, kind, f"users-{kind}-{agent}", 600)
    rewards = [1.0, 1.0] if agent == "oracle" else [0.0, 0.0]
    assert [s.reward for s in session.steps] == rewards, session.steps
    assert session.reward == rewards[0]


def _build(task: Path, kind: str) -> None:
    """The task's image, built offline (and in podman's store)."""
    (built,) = ensure_images(task)
    if kind == "podman":
        from activities.runtimes.kinds.podman import load_from_docker

        load_from_docker(built.image)


async def test_a_step_user_an_earlier_step_deleted_is_that_sessions_zero(
    polar: PolarClient, docker_image: str, tmp_path: Path
) -> None:
    task = Path(shutil.copytree(USERS_TASK, tmp_path / "users"))
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('user = "alice"\n', "", 1))  # first: root
    _build(task, "docker")
    command = '[ "$POLAR_STEP" = first ] && sed -i "/^bob:/d" /etc/passwd; true'
    session = await harbor_session(
        polar, task, command, "docker", "users-deleted", 600, SessionStatus.HARNESS_FAILED
    )
    first, second = session.steps
    assert first.reward == 0.0 and second.reward == 0.0, session.steps
    assert second.stopped == "its actions failed" and "'bob'" in (second.detail or ""), second
    assert session.reward == 0.0 and session.outcome is not None
    assert session.outcome.outcome == OutcomeClass.POLICY_FAILURE, session.outcome

"""Harbor's `[[steps]]` read as TaskSteps, field by field, and the step rules (gates and the
session's reward) as Harbor 0.25 applies them (harbor/trial/multi_step.py, trial.py)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from activities.evaluators.harbor import HarborConfig
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_toml import HarborTaskError
from polar.tasks.spec import CommandAction, NetworkSpec, TaskSpec, UploadAction
from polar.tasks.steps import below_min_reward, session_reward
from tests.support.paths import REPO

TASK = REPO / "examples" / "harbor-features" / "two-step-notes"


def _copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(TASK, tmp_path / "task"))


def test_each_step_is_read_as_harbor_resolves_it() -> None:
    (spec,) = load_harbor_tasks(TASK)
    write, extend = spec.steps
    assert spec.instruction == "" and spec.step_reward == "mean"
    assert write.instruction.startswith("Create a file named `notes.txt`")  # canary stripped
    # the agent's timeout: the step's, else [agent]'s; the verifier's: the step's, else
    # Harbor's StepConfig default (600 s), never [verifier]'s
    assert (write.harness_s, extend.harness_s) == (300.0, 240.0)
    assert write.evaluator is not None and extend.evaluator is not None
    first, second = HarborConfig.of(write.evaluator), HarborConfig.of(extend.evaluator)
    assert (first.timeout_s, second.timeout_s) == (600.0, 90.0)
    assert (write.evaluate_s, extend.evaluate_s) == (900.0, 390.0)
    assert spec.timeouts.harness_s == 300.0 and spec.timeouts.evaluate_s == 900.0
    # the task's tests/ with the step's own over them; the verifier env: the task's, then the step's
    assert first.tests_dir == str(TASK / "tests")
    assert second.step_tests_dir == str(TASK / "steps" / "extend" / "tests")
    assert second.env == {"EXPECTED_LINES": "2"} and first.env == {}
    assert write.min_reward == 1.0 and extend.min_reward is None
    # the step's workdir is put in the workspace, then its setup.sh run there
    assert write.prepare == []
    assert extend.prepare == [
        UploadAction(src=str(TASK / "steps" / "extend" / "workdir"), dest="."),
        CommandAction(command="bash setup.sh", timeout_s=900.0),
    ]


def test_final_rule_a_healthcheck_and_component_gates(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    toml = task / "task.toml"
    text = toml.read_text().replace('"mean"', '"final"')
    text = text.replace("min_reward = 1.0", "min_reward = { lines = 1.0 }")
    text += '\n[steps.healthcheck]\ncommand = "test -f seed.txt"\nretries = 2\n'
    toml.write_text(text)
    (spec,) = load_harbor_tasks(task)
    assert spec.step_reward == "final" and spec.steps[0].min_reward == {"lines": 1.0}
    check = spec.steps[1].prepare[-1]
    assert isinstance(check, CommandAction) and "test -f seed.txt" in check.command


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (("min_reward = 1.0", 'min_reward = "high"'), "steps.write"),
        (('"mean"', '"median"'), "multi_step_reward_strategy"),
        (('name = "extend"', 'name = "gone"'), "steps.gone: instruction.md"),
        (
            ("[steps.agent]", '[steps.agent]\nnetwork_mode = "dial-up"'),
            "steps.extend.agent.network_mode",
        ),
    ],
)
def test_a_step_polar_cannot_honour_is_refused_naming_it(
    tmp_path: Path, edit: tuple[str, str], field: str | None
) -> None:
    task = _copy(tmp_path)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace(*edit, 1))
    with pytest.raises(HarborTaskError) as info:
        load_harbor_tasks(task)
    assert info.value.field == field, str(info.value)


def test_a_step_needs_a_test_sh_of_its_own_or_the_tasks(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "steps" / "write" / "tests" / "test.sh").unlink()
    with pytest.raises(HarborTaskError, match=r"steps\.write: tests/test\.sh"):
        load_harbor_tasks(task)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (spec,) = load_harbor_tasks(task)  # the task's test.sh serves the step
    assert HarborConfig.of(spec.steps[0].evaluator).tests_dir == str(task / "tests")  # type: ignore[arg-type]


def test_a_steps_agent_user_is_its_harness_user() -> None:
    """`[steps.agent].user` is the user that step's harness runs as; a step without one runs
    as the task's `[agent].user` (the runtime's); each is checked at prepare; a local
    runtime has no user of the task's choosing."""
    (spec,) = load_harbor_tasks(REPO / "examples" / "harbor-features" / "step-users")
    first, second = spec.steps
    assert spec.runtime.harness_user == "alice"
    assert (first.harness_user, second.harness_user) == (None, "bob")
    assert "harness_user" not in first.model_dump_json()  # older workers read the spec
    raw = spec.model_dump(mode="json")
    raw["runtime"] = {"kind": "local"}
    with pytest.raises(ValidationError, match=r"steps\.second: harness_user is for container"):
        TaskSpec.model_validate(raw)


@pytest.mark.parametrize(
    ("task_network", "step_network", "expected"),
    [
        ("", 'network_mode = "public"', NetworkSpec(mode="public")),
        ("", 'network_mode = "no-network"', None),  # the task's own, said again
        (
            'network_mode = "allowlist"\nallowed_hosts = ["pypi.org"]',
            'network_mode = "no-network"',
            NetworkSpec(),
        ),
        ('network_mode = "public"', "", None),  # no network_mode: the task's agent's
    ],
)
def test_a_steps_own_agent_network_is_its_harness_network(
    tmp_path: Path, task_network: str, step_network: str, expected: NetworkSpec | None
) -> None:
    """`[steps.agent].network_mode` (with `allowed_hosts`) is that step's network where it
    differs from the task's agent's; prepare checks every such network with the runtime's."""
    task = _copy(tmp_path)
    toml = task / "task.toml"
    text = toml.read_text().replace("[agent]\n", f"[agent]\n{task_network}\n", 1)
    toml.write_text(text.replace("[steps.agent]\n", f"[steps.agent]\n{step_network}\n", 1))
    (spec,) = load_harbor_tasks(task)
    write, extend = spec.steps
    assert write.network is None and extend.network == expected


def test_a_task_spec_keeps_step_names_unique_and_budgets_within_its_stages() -> None:
    (spec,) = load_harbor_tasks(TASK)
    raw = spec.model_dump(mode="json")
    raw["steps"][1]["name"] = "write"
    with pytest.raises(ValidationError, match="names must be unique"):
        TaskSpec.model_validate(raw)
    raw = spec.model_dump(mode="json")
    raw["steps"][0]["harness_s"] = 9999
    with pytest.raises(ValidationError, match="past the task's timeouts.harness_s"):
        TaskSpec.model_validate(raw)


def test_min_reward_gates_as_harbor_does() -> None:
    assert below_min_reward(None, 0.0, {}) is None
    assert below_min_reward(1.0, 1.0, {}) is None
    assert below_min_reward(1.0, 0.5, {}) == "reward=0.5 below min_reward 1.0"
    assert below_min_reward(0.5, None, {}) == f"reward={-math.inf} below min_reward 0.5"
    # a table gates named components; a missing one is -inf; a reward.txt grade has `reward`
    assert below_min_reward({"a": 1.0}, 1.0, {"a": 1.0, "b": 0.0}) is None
    assert below_min_reward({"b": 0.5}, 1.0, {"a": 1.0, "b": 0.0}) == "b=0.0 below min_reward 0.5"
    assert below_min_reward({"c": 0.5}, 1.0, {"a": 1.0}) == f"c={-math.inf} below min_reward 0.5"
    assert below_min_reward({"reward": 0.5}, 1.0, {}) is None


def test_the_sessions_reward_follows_harbors_rule() -> None:
    assert session_reward("mean", [1.0, 0.0]) == 0.5
    assert session_reward("mean", [1.0, None, 0.5]) == 0.75  # ungraded steps left out
    assert session_reward("mean", [None]) is None
    assert session_reward("final", [1.0, 0.0]) == 0.0
    assert session_reward("final", [1.0, None]) is None
    assert session_reward("final", []) is None

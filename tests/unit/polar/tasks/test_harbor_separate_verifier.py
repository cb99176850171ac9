"""Harbor's separate verifier (`[verifier].environment_mode = "separate"`, or a
`[verifier.environment]`): the harbor evaluator gets no workspace changes, and its own image
where Harbor resolves one (`docker_image` through the image map, else tests/Dockerfile built
like environment/), which the evaluator's fresh runtime runs alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from activities.evaluators.harbor import HarborConfig
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_environment import IMAGE_REPO, environment_hash
from polar.tasks.harbor_toml import HarborTaskError, read_harbor_task
from polar.tasks.spec import EvaluatorSpec
from tests.support.paths import REPO

EXAMPLES = REPO / "examples"


def _copy(tmp_path: Path, name: str = "harbor/hello-file") -> Path:
    return Path(shutil.copytree(EXAMPLES / name, tmp_path / Path(name).name))


def _append(task: Path, text: str) -> None:
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + "\n" + text + "\n")


def _mode(task: Path, mode: str) -> None:
    """`[verifier].environment_mode` set in the task's own [verifier] table."""
    toml = task / "task.toml"
    text = toml.read_text().replace("[verifier]\n", f'[verifier]\nenvironment_mode = "{mode}"\n', 1)
    toml.write_text(text)


def _verifier(evaluator: EvaluatorSpec) -> HarborConfig:
    return HarborConfig.of(evaluator)


def test_the_default_shared_verifier_gets_the_changes_in_the_tasks_image(tmp_path: Path) -> None:
    (spec,) = load_harbor_tasks(_copy(tmp_path))
    config = _verifier(spec.evaluator)
    assert config.workspace_changes and config.image is None
    assert spec.evaluator.eval_runtime_spec(spec.runtime) == spec.runtime
    assert "workspace_changes" not in (spec.evaluator.harbor or {})  # older workers read it


def test_separate_mode_in_the_tasks_image_gets_no_changes(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    _mode(task, "separate")
    (spec,) = load_harbor_tasks(task)
    config = _verifier(spec.evaluator)
    assert not config.workspace_changes and config.image is None
    assert spec.evaluator.eval_runtime_spec(spec.runtime).image == spec.runtime.image


def test_a_verifier_environments_image_is_mapped_and_runs_alone(tmp_path: Path) -> None:
    task = _copy(tmp_path, "harbor-features/compose-lookup")  # sidecars and a healthcheck-free
    _append(
        task,
        '[verifier.environment]\ndocker_image = "grader:1"\n'
        '[metadata.polar.image_map]\n"grader:1" = "polar/runtime:py311"',
    )
    (spec,) = load_harbor_tasks(task)
    config = _verifier(spec.evaluator)
    assert not config.workspace_changes and config.image == "polar/runtime:py311"
    assert spec.runtime.sidecars  # the agent's environment keeps its services
    runtime = spec.evaluator.eval_runtime_spec(spec.runtime)
    assert runtime.image == "polar/runtime:py311"
    assert (runtime.sidecars, runtime.prepare, runtime.collect.empty) == ([], [], True)
    assert type(runtime).model_validate(runtime.model_dump()) == runtime  # a valid spec
    assert runtime.workdir == spec.runtime.workdir and runtime.kind == spec.runtime.kind


def test_a_tests_dockerfile_is_the_verifiers_image(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "tests" / "Dockerfile").write_text("FROM polar/runtime:py311\nCOPY . /tests\n")
    _append(task, "[verifier.environment]\ncpus = 1")
    (spec,) = load_harbor_tasks(task)
    image = _verifier(spec.evaluator).image
    harbor = read_harbor_task(task)
    assert image == f"{IMAGE_REPO}:{environment_hash(harbor, None, harbor.tests_dir)[:20]}"
    assert image != spec.runtime.image  # tests/ and environment/ are different contexts
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (again,) = load_harbor_tasks(task)
    assert _verifier(again.evaluator).image != image  # keyed on the tests' content


def test_steps_inherit_the_mode_or_set_their_own(tmp_path: Path) -> None:
    task = _copy(tmp_path, "harbor-features/two-step-notes")
    _mode(task, "separate")
    (spec,) = load_harbor_tasks(task)
    assert [_verifier(s.evaluator).workspace_changes for s in spec.steps] == [False, False]
    toml = task / "task.toml"  # the first step's verifier says shared: it gets the changes
    steps = toml.read_text().split("[[steps]]")
    steps[1] = steps[1].rstrip("\n") + '\n[steps.verifier]\nenvironment_mode = "shared"\n\n'
    toml.write_text("[[steps]]".join(steps))
    (spec,) = load_harbor_tasks(task)
    assert [_verifier(s.evaluator).workspace_changes for s in spec.steps] == [True, False]


@pytest.mark.parametrize(
    ("mode", "field"),
    [("shared", "verifier.environment"), ("separate", "tests/docker-compose.yaml")],
)
def test_what_harbor_or_polar_refuses_is_named(tmp_path: Path, mode: str, field: str) -> None:
    task = _copy(tmp_path)
    (task / "tests" / "docker-compose.yaml").write_text("services: {}\n")
    _mode(task, mode)
    _append(task, "[verifier.environment]\ncpus = 1")
    with pytest.raises(HarborTaskError) as err:
        load_harbor_tasks(task)
    assert err.value.field == field, err.value


def test_a_verifier_compose_file_gives_the_verifier_its_own_services(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "tests" / "Dockerfile").write_text("FROM polar/runtime:py311\nCOPY . /tests\n")
    (task / "tests" / "docker-compose.yaml").write_text(
        "services:\n  main:\n    environment:\n      GRADER: 'on'\n"
        "  oracle-db:\n    image: grader-db:1\n    command: ['sleep', 'infinity']\n"
    )
    _mode(task, "separate")
    _append(task, '[metadata.polar.image_map]\n"grader-db:1" = "polar/runtime:py311"')
    (spec,) = load_harbor_tasks(task)
    config = _verifier(spec.evaluator)
    assert [(s.name, s.image) for s in config.sidecars] == [("oracle-db", "polar/runtime:py311")]
    assert config.env["GRADER"] == "on"  # its compose `main` environment
    runtime = spec.evaluator.eval_runtime_spec(spec.runtime)
    assert [s.name for s in runtime.sidecars] == ["oracle-db"] and not spec.runtime.sidecars


def test_a_steps_own_verifier_environment_wins_over_the_tasks(tmp_path: Path) -> None:
    task = _copy(tmp_path, "harbor-features/two-step-notes")
    step_tests = task / "steps" / "extend" / "tests"
    (step_tests / "Dockerfile").write_text("FROM polar/runtime:py311\nCOPY . /tests\n")
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[steps.verifier]\n", '[steps.verifier]\nenvironment_mode = "separate"\n', 1
        )
        + "\n[steps.verifier.environment]\ncpus = 1\n"
    )
    (spec,) = load_harbor_tasks(task)
    write, extend = (_verifier(s.evaluator) for s in spec.steps)
    assert write.workspace_changes and write.image is None  # the task's pass: shared
    harbor = read_harbor_task(task)
    own = f"{IMAGE_REPO}:{environment_hash(harbor, None, step_tests)[:20]}"
    assert not extend.workspace_changes and extend.image == own
    toml.write_text(
        toml.read_text().replace(
            "[steps.verifier.environment]\ncpus = 1",
            '[steps.verifier.environment]\ndocker_image = "g:1"',
        )
    )
    (spec,) = load_harbor_tasks(task)
    assert _verifier(spec.steps[1].evaluator).image == "g:1"  # a docker_image first


def test_the_verifier_environments_resources_are_its_runtimes(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "tests" / "Dockerfile").write_text("FROM polar/runtime:py311\n")
    _append(task, "[verifier.environment]\ncpus = 0.5\nmemory_mb = 512")
    (spec,) = load_harbor_tasks(task)
    runtime = spec.evaluator.eval_runtime_spec(spec.runtime)
    assert (runtime.cpus, runtime.memory, runtime.disk) == (0.5, "512m", spec.runtime.disk)
    assert (spec.runtime.cpus, spec.runtime.memory) == (1, "1024m")  # the agent's stay
    _append(task, "storage_mb = 3")
    with pytest.raises(HarborTaskError) as err:
        load_harbor_tasks(task)
    assert err.value.field == "verifier.environment.storage_mb"

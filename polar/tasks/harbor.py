"""Harbor tasks (harbor 0.25's format) → TaskSpecs.

A Harbor task is a directory:

    task.toml          # [task] [metadata] [agent] [verifier] [environment] [solution]
    instruction.md     # what the agent is told (leading canary lines stripped, as Harbor does)
    environment/       # a Dockerfile (built locally: polar/tasks/harbor_images.py), or
                       # [environment].docker_image names a prebuilt image
    tests/test.sh      # the verifier: writes /logs/verifier/reward.txt or reward.json
    solution/solve.sh  # the oracle (polar tasks audit runs it)

A dataset is a directory of such directories. `load_harbor_tasks(path)` reads
either into TaskSpecs: a `docker` runtime of the environment's image, the
task's resources, the agent's timeout as the harness budget and its user as the
runtime's `harness_user`, and an evaluator
of kind `harbor` (activities/evaluators/harbor/) that grades in a fresh
runtime with the task's tests, user and env. Every field Polar cannot honour
is refused with `HarborTaskError` naming the task and the field: nothing is
dropped silently (docs/harbor.md lists them, with the reasons).

The parts: harbor_toml.py reads the task dir and its task.toml (HarborTask,
HarborTaskError); harbor_environment.py maps `[environment]` to the runtime and
its image; harbor_harness.py what the harness gets (env, skills);
harbor_network.py the phases' network policies; harbor_verifier.py
scans the verifier for running the agent's code. This module assembles the spec.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from polar.ids import TASK_ID_MAX
from polar.tasks.harbor_artifacts import task_collect
from polar.tasks.harbor_compose import read_compose
from polar.tasks.harbor_environment import check_environment, environment_image, runtime_spec
from polar.tasks.harbor_harness import McpReach, agent_user, task_harness
from polar.tasks.harbor_healthcheck import healthcheck_action
from polar.tasks.harbor_network import baseline_policy, phase_networks
from polar.tasks.harbor_separate import SeparateVerifier, separate_verifier
from polar.tasks.harbor_steps import harbor_steps, step_reward_rule
from polar.tasks.harbor_toml import (
    HarborTask,
    HarborTaskError,
    check_known_and_supported,
    find_task_dirs,
    first_error,
    read_harbor_task,
    resolved_env,
    timeout_seconds,
)
from polar.tasks.harbor_verifier import verifier_runs_agent_code
from polar.tasks.spec import (
    MAX_TIMEOUT_S,
    EvaluatorSpec,
    HarnessSpec,
    NetworkSpec,
    TaskSpec,
    TaskStep,
    Timeouts,
)

__all__ = [
    "HarborDataset",
    "dockerfile_warning",
    "load_harbor_dataset",
    "load_harbor_tasks",
    "task_id_of",
    "task_spec",
    "verifier_warning",
]

EVALUATE_MARGIN_S = 300.0
"""The evaluate stage's time beyond the verifier's: the fresh runtime, the changes applied."""


def load_harbor_tasks(
    path: Path | str,
    *,
    harness: HarnessSpec | None = None,
    num_sessions: int = 1,
    image_map: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[TaskSpec]:
    """The TaskSpecs of a Harbor task dir, or of every task dir in a dataset dir.

    `harness`: the agent (default: Pi, `pi`); the task's `[environment].env` is added under
    its own env. `image_map`: the deployment's map of image names to local images (the
    task's own `[metadata.polar.image_map]` wins). `environ`: where `${VAR}` templates in
    env tables are resolved (default: this process's environment).
    Raises HarborTaskError naming the first task Polar cannot honour and its fields
    (`load_harbor_dataset` goes on past it).
    """
    dataset = load_harbor_dataset(
        path, harness=harness, num_sessions=num_sessions, image_map=image_map, environ=environ
    )
    if dataset.refused:
        raise dataset.refused[0]
    return dataset.specs


@dataclass
class HarborDataset:
    """What a dataset dir loads to: the TaskSpecs of the tasks Polar can honour, and each
    refused task's error (naming its task and every field refused)."""

    specs: list[TaskSpec] = field(default_factory=list)
    refused: list[HarborTaskError] = field(default_factory=list)


def load_harbor_dataset(
    path: Path | str,
    *,
    harness: HarnessSpec | None = None,
    num_sessions: int = 1,
    image_map: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> HarborDataset:
    """`load_harbor_tasks`, going on past a refused task: every task dir is read, and each
    one Polar cannot honour is kept with its error instead of stopping the load."""
    out = HarborDataset()
    for d in find_task_dirs(Path(path)):
        try:
            out.specs.append(
                task_spec(
                    read_harbor_task(d),
                    harness=harness,
                    num_sessions=num_sessions,
                    image_map=image_map,
                    environ=environ,
                )
            )
        except HarborTaskError as exc:
            out.refused.append(exc)
    return out


def task_spec(
    task: HarborTask,
    *,
    harness: HarnessSpec | None = None,
    num_sessions: int = 1,
    image_map: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> TaskSpec:
    """One read Harbor task → its TaskSpec (HarborTaskError for what Polar cannot honour)."""
    environ = os.environ if environ is None else environ
    check_known_and_supported(task)
    env_cfg, agent, verifier = (task.section(s) for s in ("environment", "agent", "verifier"))
    agent_network, verifier_network = phase_networks(task, env_cfg, agent, verifier)
    check_environment(task, env_cfg, verifier)
    image = environment_image(task, image_map)
    compose = read_compose(task, image_map)
    sidecars, main_env = compose.sidecars, compose.main_env
    services = {s.name for s in sidecars}
    runtime = runtime_spec(task, env_cfg, image).model_copy(
        update={
            "network": agent_network,
            "sidecars": sidecars,
            "depends_on": compose.main_depends_on,
            "harness_user": agent_user(task, agent),
            "collect": task_collect(task, services),  # copied out after the agent
        }
    )
    if env_cfg.get("healthcheck") is not None:  # ready before the agent starts, as in Harbor
        runtime.prepare.append(healthcheck_action(task, env_cfg["healthcheck"]))
    # compose's `main` environment is every exec's in it: the agent's and the verifier's
    task_env = main_env | resolved_env(task, "environment.env", env_cfg.get("env"), environ)
    verifier_env = resolved_env(task, "verifier.env", verifier.get("env"), environ)

    def step_evaluator(v: dict[str, Any], network: NetworkSpec) -> EvaluatorSpec:
        env = resolved_env(task, "steps.verifier.env", v.get("env"), environ)
        user = v.get("user", verifier.get("user"))
        env = task_env | verifier_env | env
        separate = separate_verifier(task, image_map, v["step"], v)  # its own, else the task's
        return harbor_evaluator(task, v["timeout_sec"], network, v["tests"], user, env, separate)

    steps = harbor_steps(task, env_cfg, agent_network, step_evaluator, services)
    if not steps and not (task.tests_dir / "test.sh").is_file():
        raise HarborTaskError(task.name, "tests/test.sh", "missing: the verifier Polar runs")
    verifier_timeout = timeout_seconds(
        task, "verifier.timeout_sec", verifier.get("timeout_sec"), 600.0
    )
    agent_timeout = timeout_seconds(task, "agent.timeout_sec", agent.get("timeout_sec"), None)
    user = verifier.get("user")
    base_harness = harness or HarnessSpec(kind="pi")
    reach = McpReach(frozenset(s.name for s in sidecars), agent_network, environ)
    metadata = _metadata(task, env_cfg, main_env, runtime.workdir, user)
    try:
        steps = _step_budgets(steps, agent_timeout)
        timeouts = _timeouts(steps, agent_timeout, verifier_timeout)
        return TaskSpec(
            task_id=task_id_of(task.name),
            instruction=task.instruction,
            num_sessions=num_sessions,
            runtime=runtime,
            harness=task_harness(task, env_cfg, base_harness, task_env, reach),
            evaluator=harbor_evaluator(  # a step's own, where the task has steps
                task,
                verifier_timeout,
                verifier_network,
                (str(task.tests_dir), None),
                user,
                {**task_env, **verifier_env},
                separate_verifier(task, image_map),
            ),
            timeouts=timeouts,
            steps=steps,
            step_reward=step_reward_rule(task),
            metadata={"harbor": metadata},
        )
    except ValidationError as exc:
        raise HarborTaskError(task.name, None, first_error(exc)) from exc


def harbor_evaluator(
    task: HarborTask,
    timeout_s: float,
    network: NetworkSpec,
    tests: tuple[str, str | None],
    user: Any,
    env: dict[str, str],
    separate: SeparateVerifier | None = None,
) -> EvaluatorSpec:
    """The `harbor` evaluator of a task (or of one of its steps: `tests` is the task's
    tests dir and the step's own, laid over it); `separate`: Harbor's separate verifier's
    environment (it gets the collected artifacts, never the session's workspace changes),
    None for the shared one."""
    if separate is not None:  # its compose `main` environment, under the verifier's own
        env = separate.env | env
    config = verifier_config(task, None if user is None else str(user), env)
    config["tests_dir"], step_tests = tests
    if step_tests is not None:
        config["step_tests_dir"] = step_tests
    if separate is not None:
        config["workspace_changes"] = False
        if separate.image is not None:  # its own environment: image and services
            config["image"] = separate.image
            config["sidecars"] = [s.model_dump(mode="json") for s in separate.sidecars]
            if separate.depends_on:  # what its `main` waits for among them
                config["depends_on"] = separate.depends_on
        if separate.resources:  # its [verifier.environment]'s cpus, memory, disk
            config["resources"] = separate.resources
    return EvaluatorSpec(
        kind="harbor", harbor=config | {"timeout_s": float(timeout_s)} | network_config(network)
    )


def _step_budgets(steps: list[TaskStep], agent_timeout: float | None) -> list[TaskStep]:
    """Each step's harness budget (its own, else `[agent]`'s) and evaluate stage time (its
    verifier's plus the margin for the fresh runtime)."""
    out = []
    for step in steps:
        config = step.evaluator.kind_config() if step.evaluator else None
        verifier_s = float((config or {}).get("timeout_s", 600.0))
        update = {
            "harness_s": step.harness_s or agent_timeout,
            "evaluate_s": min(MAX_TIMEOUT_S, verifier_s + EVALUATE_MARGIN_S),
        }
        out.append(step.model_copy(update=update))
    return out


def _timeouts(
    steps: list[TaskStep], agent_timeout: float | None, verifier_timeout: float
) -> Timeouts:
    """The stages' times: the task's, or the longest of its steps' (each run and grade is
    a stage of its own)."""
    evaluate = [s.evaluate_s for s in steps if s.evaluate_s]
    harness = [s.harness_s for s in steps if s.harness_s]
    timeouts: dict[str, Any] = {
        "evaluate_s": max(evaluate or [min(MAX_TIMEOUT_S, verifier_timeout + EVALUATE_MARGIN_S)])
    }
    if harness or agent_timeout is not None:
        timeouts["harness_s"] = max([*harness, agent_timeout or 0.0])
    return Timeouts(**timeouts)


def verifier_config(task: HarborTask, user: str | None, env: dict[str, str]) -> dict[str, Any]:
    """The `harbor` evaluator's config of a task, as its model (activities/evaluators/harbor/
    config.py) writes it; `polar submit` / `polar tasks load` validate it with that model."""
    return {
        "task": task.name,
        "tests_dir": str(task.tests_dir),
        "test_script": "test.sh",
        "user": user,
        "env": env,
    }


def network_config(network: NetworkSpec) -> dict[str, Any]:
    """The verifier's `network`, left out while sealed (as the harbor config writes it)."""
    return {} if network.sealed else {"network": network.model_dump(mode="json")}


def dockerfile_warning(spec: TaskSpec) -> str | None:
    """The warning for a Harbor task that sets both `[environment].docker_image` and an
    `environment/Dockerfile`: the prebuilt image is what runs, the Dockerfile is not built."""
    harbor = spec.metadata.get("harbor")
    if not isinstance(harbor, dict) or not harbor.get("docker_image") or not harbor.get("dir"):
        return None
    if not (Path(harbor["dir"]) / "environment" / "Dockerfile").is_file():
        return None
    return (
        f"Harbor task {harbor.get('name', spec.task_id)}: it sets both "
        f"[environment].docker_image ({harbor['docker_image']}) and environment/Dockerfile: "
        f"its sessions run the image {spec.runtime.image}, and the Dockerfile is not built"
    )


def verifier_warning(spec: TaskSpec) -> str | None:
    """The warning for a Harbor task whose verifier seems to run the agent's code as the
    owner of /logs/verifier (`metadata.harbor.verifier_runs_agent_code`), or None."""
    harbor = spec.metadata.get("harbor")
    if not isinstance(harbor, dict) or not harbor.get("verifier_runs_agent_code"):
        return None
    risk, name = harbor["verifier_runs_agent_code"], harbor.get("name", spec.task_id)
    return (
        f"Harbor task {name}: its verifier seems to run the agent's code as the user "
        f"who owns /logs/verifier ({risk}): that code can write the reward files itself, and "
        "Polar cannot tell its writes from the verifier's. Run the code under test as another "
        "user than the verifier's (docs/harbor.md, 'Who writes the reward'), and audit the "
        "task (polar tasks audit: the code-writes-reward adversary)."
    )


def task_id_of(name: str) -> str:
    """A Polar task id from a Harbor task name (`org/name` → `org__name`)."""
    tid = re.sub(r"[^A-Za-z0-9._-]", "-", name.replace("/", "__")).lstrip("._-")
    return re.sub(r"\.{2,}", ".", tid)[:TASK_ID_MAX] or "harbor-task"


def _metadata(
    task: HarborTask, env_cfg: dict[str, Any], main_env: dict[str, str], workdir: str, user: Any
) -> dict[str, Any]:
    """What of the task Polar keeps but does not act on (for people and the audit)."""
    package = task.section("task")
    solution = task.section("solution")
    metadata: dict[str, Any] = {
        "name": task.name,
        "dir": str(task.dir),
        "solution_dir": str(task.solution_dir),
        "schema_version": str(task.config.get("schema_version", task.config.get("version", "1.4"))),
        "version": package.get("version"),
        "description": package.get("description", ""),
        "authors": package.get("authors", []),
        "keywords": package.get("keywords", []),
        "source": task.config.get("source"),
        "metadata": task.section("metadata"),
        "solution_env": solution.get("env", {}),
        "build_timeout_s": float(env_cfg.get("build_timeout_sec", 600.0)),
        "docker_image": env_cfg.get("docker_image"),
        "network_mode": baseline_policy(task, env_cfg)[0],
        "verifier_environment_mode": task.section("verifier").get("environment_mode"),
    }
    if main_env:  # in the agent's and the verifier's env, as compose gives it to `main`
        metadata["compose_env"] = main_env
    risk = verifier_runs_agent_code(task.tests_dir, workdir, user)
    if risk is not None:  # `polar submit` and `polar tasks load` print the warning
        metadata["verifier_runs_agent_code"] = risk
    return metadata

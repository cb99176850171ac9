"""A Harbor task's `[[steps]]` (harbor 0.25's multi-step tasks) → TaskSteps.

Each step is a folder `steps/{name}/`: `instruction.md` (required), `workdir/` (its files
put in the workspace before the step's agent, `workdir/setup.sh` then run there with
bash), `tests/` (copied over the task's `tests/` for the step's verifier: the step's
`test.sh`, else the task's) and `solution/solve.sh` (the step's oracle). Per step, as
Harbor resolves them: the agent's timeout (the step's, else `[agent]`'s), the verifier's
timeout (the step's `[steps.verifier]`, whose default is Harbor's 600 s), user (the
step's, else `[verifier]`'s) and env (`[verifier].env`, then the step's), `min_reward`,
and a `healthcheck` run after the step's setup. `multi_step_reward_strategy` (`mean`,
Harbor's default, or `final`) becomes the task's `step_reward`.

A step's `artifacts` and `[[steps.verifier.collect]]` are collected after its harness, after
the task's own (polar/tasks/harbor_artifacts.py), kept under `steps/{name}/artifacts/`. A
step's `[steps.agent]` `user` and `network_mode` (with `allowed_hosts`) are the user its
harness runs as and the network it gets (the task's otherwise), as Harbor's multi-step trial
runs each step's agent phase: the egress proxy is opened per harness run, so a step's network
is its own whatever the task's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from polar.tasks.harbor_artifacts import harbor_collect
from polar.tasks.harbor_harness import agent_user
from polar.tasks.harbor_healthcheck import healthcheck_action
from polar.tasks.harbor_network import phase_networks
from polar.tasks.harbor_toml import (
    KNOWN_KEYS,
    HarborTask,
    HarborTaskError,
    first_error,
    strip_canary,
    timeout_seconds,
)
from polar.tasks.spec import CommandAction, EvaluatorSpec, NetworkSpec, UploadAction
from polar.tasks.steps import StepRule, TaskStep

__all__ = ["SETUP_TIMEOUT_S", "harbor_steps", "step_reward_rule"]

SETUP_TIMEOUT_S = 900.0
"""The most a step's `workdir/setup.sh` may take (Harbor sets none)."""

_STEP_KEYS = {"name", "agent", "verifier", "min_reward", "healthcheck", "artifacts"}

Evaluator = Callable[[dict[str, Any], NetworkSpec], EvaluatorSpec]
"""Makes a step's evaluator from its verifier settings and network (harbor.py's)."""


def step_reward_rule(task: HarborTask) -> StepRule:
    """`multi_step_reward_strategy` (unset: Harbor's `mean`)."""
    value = task.config.get("multi_step_reward_strategy") or "mean"
    if value not in ("mean", "final"):
        raise HarborTaskError(
            task.name, "multi_step_reward_strategy", f"{value!r}: 'mean' or 'final'"
        )
    return "final" if value == "final" else "mean"


def harbor_steps(
    task: HarborTask,
    env_cfg: dict[str, Any],
    agent_network: NetworkSpec,
    evaluator: Evaluator,
    services: set[str] | None = None,
) -> list[TaskStep]:
    """The task's steps (empty without `[[steps]]`); HarborTaskError naming the step's field
    Polar cannot honour, or a step folder's missing file. `services`: the task's compose
    services (a step's artifacts and collect hooks may name them)."""
    raw = task.config.get("steps") or []
    if not isinstance(raw, list) or not all(isinstance(s, dict) for s in raw):
        raise HarborTaskError(task.name, "steps", "must be an array of tables ([[steps]])")
    return [
        _step(task, env_cfg, agent_network, evaluator, s, i, services or set())
        for i, s in enumerate(raw)
    ]


def _step(
    task: HarborTask,
    env_cfg: dict[str, Any],
    agent_network: NetworkSpec,
    evaluator: Evaluator,
    config: dict[str, Any],
    index: int,
    services: set[str],
) -> TaskStep:
    name = config.get("name")
    if not isinstance(name, str) or not name:
        raise HarborTaskError(task.name, f"steps[{index}].name", "missing")
    where = f"steps.{name}"
    agent, verifier = (
        _section(task, config, where, "agent"),
        _section(task, config, where, "verifier"),
    )
    _check_keys(task, where, config, agent, verifier)
    user = agent_user(task, agent, f"{where}.agent")
    folder = task.dir / "steps" / name
    try:
        instruction = strip_canary((folder / "instruction.md").read_text())
    except OSError as exc:
        raise HarborTaskError(
            task.name, f"{where}: instruction.md", f"cannot read it: {exc}"
        ) from None
    step_network, verifier_network = phase_networks(task, env_cfg, agent, verifier, f"{where}.")
    own_network = agent.get("network_mode") is not None and step_network != agent_network
    if verifier.get("network_mode") is None:  # the task's verifier's, as Harbor inherits it
        verifier_network = _task_verifier_network(task, env_cfg)
    harness_s = timeout_seconds(task, f"{where}.agent.timeout_sec", agent.get("timeout_sec"), None)
    verifier_s = timeout_seconds(
        task, f"{where}.verifier.timeout_sec", verifier.get("timeout_sec"), 600.0
    )
    try:
        return TaskStep(
            name=name,
            instruction=instruction,
            harness_s=harness_s,
            evaluator=evaluator(
                {
                    **verifier,
                    "timeout_sec": verifier_s,
                    "tests": _tests(task, folder, where),
                    "step": name,
                },
                verifier_network,
            ),
            prepare=_actions(task, folder, config, where),
            collect=harbor_collect(task, f"{where}.", config, services, convention=False),
            min_reward=config.get("min_reward"),
            harness_user=user,
            network=step_network if own_network else None,
        )
    except ValidationError as exc:
        raise HarborTaskError(task.name, where, first_error(exc)) from None


def _section(task: HarborTask, config: dict[str, Any], where: str, name: str) -> dict[str, Any]:
    value = config.get(name) or {}
    if not isinstance(value, dict):
        raise HarborTaskError(task.name, f"{where}.{name}", "must be a table")
    return value


def _check_keys(
    task: HarborTask,
    where: str,
    config: dict[str, Any],
    agent: dict[str, Any],
    verifier: dict[str, Any],
) -> None:
    """Every key a step has is one of Harbor's."""
    for keys, table, prefix in (
        (_STEP_KEYS, config, ""),
        (KNOWN_KEYS["agent"], agent, "agent."),
        (KNOWN_KEYS["verifier"], verifier, "verifier."),
    ):
        unknown = sorted(set(table) - keys)
        if unknown:
            raise HarborTaskError(
                task.name, f"{where}.{prefix}{unknown[0]}", "not a field of Harbor 0.25's steps"
            )


def _tests(task: HarborTask, folder: Path, where: str) -> tuple[str, str | None]:
    """(tests_dir, step_tests_dir) of a step's verifier: the task's tests/ with the step's
    over it (Harbor's order), or the step's alone; HarborTaskError without a test.sh."""
    own, shared = folder / "tests", task.tests_dir
    if not (own / "test.sh").is_file() and not (shared / "test.sh").is_file():
        raise HarborTaskError(
            task.name, f"{where}: tests/test.sh", "missing in the step and in the task's tests/"
        )
    if not shared.is_dir():
        return str(own), None
    return str(shared), str(own) if own.is_dir() else None


def _actions(
    task: HarborTask, folder: Path, config: dict[str, Any], where: str
) -> list[UploadAction | CommandAction]:
    """The step's workdir put in the workspace, its setup.sh run, its healthcheck."""
    actions: list[UploadAction | CommandAction] = []
    workdir = folder / "workdir"
    if workdir.is_dir():
        actions.append(UploadAction(src=str(workdir), dest="."))
        if (workdir / "setup.sh").is_file():
            actions.append(CommandAction(command="bash setup.sh", timeout_s=SETUP_TIMEOUT_S))
    if config.get("healthcheck") is not None:
        actions.append(healthcheck_action(task, config["healthcheck"]))
    return actions


def _task_verifier_network(task: HarborTask, env_cfg: dict[str, Any]) -> NetworkSpec:
    """The task-level verifier's network (a step without its own inherits it)."""
    return phase_networks(task, env_cfg, task.section("agent"), task.section("verifier"))[1]

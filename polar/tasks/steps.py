"""Multi-step tasks: one session, its harness told one instruction after another.

A task with `steps` runs them in order in the session's one runtime (each step's work stays
in place for the next): before a step its `prepare` actions run there (files put in place, a
setup command, a readiness check), then the harness is started with the step's instruction
and budget (as the step's own `harness_user`, with its own `network`, where it names them:
Harbor's `[steps.agent]`), then the workspace as it stands is graded by the step's evaluator
in a fresh runtime, as a one-step session is. A step below its `min_reward` ends the
session: the steps after it are not run (Harbor's `min_reward`). The session's reward
follows the task's `step_reward` rule over the steps graded: `mean` (Harbor's default) or
`final` (the last one run). Each step's outcome is kept (`SessionResult.steps`).

Pure rules (no I/O): the Session workflow applies them (workflows/session_steps.py).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from polar.tasks.collect_spec import CollectSpec
from polar.tasks.evaluator_spec import EvaluatorSpec
from polar.tasks.runtime_spec import HARNESS_USER_PATTERN, NetworkSpec
from polar.tasks.sources import PrepareAction
from polar.tasks.strict import MAX_TIMEOUT_S, StrictModel

__all__ = ["MAX_STEPS", "StepRule", "TaskStep", "below_min_reward", "session_reward"]

MAX_STEPS = 64
"""The most steps a task may have (each is a harness run and a grading)."""

StepRule = Literal["mean", "final"]
"""How a multi-step session's reward follows from its steps' (Harbor's
`multi_step_reward_strategy`)."""


class TaskStep(StrictModel):
    """One step of a multi-step task (`TaskSpec.steps`)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    instruction: str = Field(min_length=1)
    harness_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="the step's harness budget (None: the task's timeouts.harness_s)",
    )
    harness_user: str | None = Field(
        default=None,
        pattern=HARNESS_USER_PATTERN,
        exclude_if=lambda v: v is None,
        description="containers: the user this step's harness runs as (Harbor's "
        "`[steps.agent].user`); None: the runtime's `harness_user`",
    )
    network: NetworkSpec | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="the network this step's harness gets (Harbor's `[steps.agent]` "
        "`network_mode`, `allowed_hosts`), served by the worker's egress proxy as the "
        "runtime's is; None: the runtime's `network`",
    )
    evaluate_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="the step's evaluate stage time (None: the task's timeouts.evaluate_s)",
    )
    evaluator: EvaluatorSpec | None = Field(
        default=None, description="what grades the step (None: the task's evaluator)"
    )
    prepare: list[PrepareAction] = Field(
        default_factory=list,
        description="run in the session's runtime before the step's harness starts (files "
        "uploaded into it, a setup command, a readiness check); a failure ends the session "
        "as the task's error",
    )
    collect: CollectSpec = Field(
        default_factory=CollectSpec,
        exclude_if=lambda v: v.empty,
        description="collected after the step's harness besides the runtime's own `collect` "
        "(kept under the step's `steps/{name}/artifacts/`)",
    )
    min_reward: float | dict[str, float] | None = Field(
        default=None,
        description="stop after this step when its reward is below it (a number), or when "
        "any named reward component is below its threshold or missing (a table)",
    )

    @field_validator("min_reward")
    @classmethod
    def _finite(cls, v: float | dict[str, float] | None) -> float | dict[str, float] | None:
        values = v.values() if isinstance(v, dict) else [] if v is None else [v]
        if any(not math.isfinite(x) for x in values):
            raise ValueError("min_reward thresholds must be finite numbers")
        return v


def below_min_reward(
    min_reward: float | dict[str, float] | None,
    reward: float | None,
    components: dict[str, float],
) -> str | None:
    """Why a step's outcome is below its `min_reward` (the steps after it are not run), or
    None. As Harbor gates: a number is the step's reward; a table names reward components
    (a grade without named components has one, `reward`); a step without a reward, or a
    missing component, counts as -inf."""
    if min_reward is None:
        return None
    gates = min_reward if isinstance(min_reward, dict) else {"reward": min_reward}
    got: dict[str, float] = {}
    if reward is not None:
        got = {"reward": reward} if not isinstance(min_reward, dict) else components
        got = got or {"reward": reward}
    for key, threshold in gates.items():
        actual = got.get(key, -math.inf)
        if actual < threshold:
            return f"{key}={actual} below min_reward {threshold}"
    return None


def session_reward(rule: StepRule, rewards: list[float | None]) -> float | None:
    """The session's reward from its steps' rewards in order (None: a step not graded).

    `final`: the last step run's (None when it was not graded). `mean`: the mean over the
    steps graded (steps without a reward left out, as Harbor leaves out steps without a
    verifier result); None when none was graded."""
    if rule == "final":
        return rewards[-1] if rewards else None
    graded = [r for r in rewards if r is not None]
    return sum(graded) / len(graded) if graded else None

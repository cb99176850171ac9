"""A multi-step session's stages (polar/tasks/steps.py): after prepare, each step's run and
evaluate in turn, then one build and one score over the whole session.

Every step runs in the session's one runtime, so each step's harness finds the earlier
steps' work in place; each step is graded in a fresh runtime like a one-step session. A
step below its `min_reward` stops the steps after it. A step whose actions fail after an
earlier step's harness ran there scores 0 and stops the rest: that runtime is the
session's doing, so its failure is no proof the task is broken (a zero stays a zero). The
session's status is the worst of its steps' runs (timeout, then failed, then completed),
its reward the task's `step_reward` rule over the steps graded, and every step's outcome
is kept in `SessionResult.steps`. The build reads the records of every step's run as one
run: a chain goes on from a step's calls to the next's where the conversation is
append-only (a harness resuming its session), and starts anew where it is not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from polar.contracts import (
        EvaluateResult,
        RuntimeHandle,
        SessionResult,
        SessionSpec,
        StepOutcome,
    )
    from polar.outcomes import TASK_ERRORS
    from polar.records import SessionStatus
    from polar.tasks.steps import StepRule, TaskStep, below_min_reward, session_reward
    from workflows.placement import Placement

if TYPE_CHECKING:
    from workflows.session import Session

__all__ = ["InfraFault", "in_step", "run_steps"]

_WORST = (SessionStatus.TIMEOUT, SessionStatus.HARNESS_FAILED, SessionStatus.COMPLETED)


class InfraFault(Exception):
    """The placement's run ended `infra_error` and is run again on a fresh runtime."""


def in_step(step: TaskStep | None, named: dict[str, str]) -> dict[str, str]:
    """Artifact names of a step's run or grade under `steps/{name}/` (as is without one)."""
    return named if step is None else {f"steps/{step.name}/{k}": v for k, v in named.items()}


async def run_steps(
    session: Session,
    spec: SessionSpec,
    result: SessionResult,
    placement: Placement,
    runtime: RuntimeHandle,
) -> None:
    """Run, grade and gate each step in order; then build and score the whole session.
    Raises InfraFault where a step's run ended `infra_error` and is to be run again."""
    task = spec.task
    first_base: int | None = None
    rewards: list[float | None] = []
    attempts: list[int] = []  # each step's run, built as one
    for index, step in enumerate(task.steps):
        harness = await session._run(spec, result, placement, runtime, step)
        if first_base is None:
            first_base = session._run_base  # every step's records are the session's
        if harness is not None:
            attempts.append(harness.attempt)
        outcome = StepOutcome(name=step.name, status=result.status)
        result.steps.append(outcome)
        if harness is None and result.error_type == "PrepareFailed" and index > 0:
            _failed_after_the_harness(result, outcome)
            rewards.append(0.0)
            break
        if harness is None and result.error_type in TASK_ERRORS:
            return  # refused before any harness ran: nothing to build or grade
        if session._retry_infra(spec, result):
            raise InfraFault
        evaluation = await session._evaluate(spec, result, placement, runtime, None, step)
        _graded(step, outcome, evaluation, result)
        rewards.append(outcome.reward)
        if result.status == SessionStatus.ERROR:
            break  # graded for the record; nothing after an error is a verdict
        if outcome.stopped is not None:
            break
    placement.release_early()
    _session_outcome(task.step_reward, result, rewards)
    build = await session._build(spec, result, first_base, attempts)
    if build.num_traces:
        await session._score(result, build, None)


def _graded(
    step: TaskStep,
    outcome: StepOutcome,
    evaluation: EvaluateResult | None,
    result: SessionResult,
) -> None:
    """The step's grade in its outcome (None: withheld, the run ended in error), and why
    it stops the steps after it (below its `min_reward`), if it does."""
    if evaluation is None:
        outcome.detail = result.warnings[-1] if result.warnings else "reward withheld"
    else:
        outcome.reward, outcome.detail = evaluation.reward, evaluation.detail
        outcome.components = dict(evaluation.components)
    outcome.stopped = below_min_reward(step.min_reward, outcome.reward, outcome.components)


def _failed_after_the_harness(result: SessionResult, outcome: StepOutcome) -> None:
    """A step's actions failed in the runtime an earlier step's harness had: the step's 0."""
    outcome.status = SessionStatus.HARNESS_FAILED
    outcome.reward = 0.0
    outcome.detail = (
        f"{result.error}: the earlier steps' harness ran in this runtime, so the failure "
        "is no proof the task is broken; the step scores 0"
    )
    outcome.stopped = "its actions failed"
    result.status = SessionStatus.HARNESS_FAILED
    result.error = result.error_type = result.error_stage = None


def _session_outcome(rule: StepRule, result: SessionResult, rewards: list[float | None]) -> None:
    """The session's status (the worst of its steps' runs) and reward (the task's rule)."""
    if result.status != SessionStatus.ERROR:
        run = {s.status for s in result.steps}
        result.status = next((s for s in _WORST if s in run), SessionStatus.COMPLETED)
        result.reward = session_reward(rule, rewards)
    else:
        result.reward = None
    graded = ", ".join(f"{s.name}: {'-' if s.reward is None else s.reward}" for s in result.steps)
    result.evaluation = f"{len(result.steps)} step(s) ({graded}); {rule}: {result.reward}"

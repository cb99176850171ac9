"""The kinds a task names, checked by the worker's registries and each kind's own model:
what `polar submit` and `polar tasks load` run before anything is submitted (the worker
checks each kind again at the stage that uses it)."""

from __future__ import annotations

from activities.evaluators import check_evaluator
from activities.harnesses import check_harness
from activities.runtimes import check_runtime
from polar.tasks.spec import EvaluatorSpec, TaskSpec

__all__ = ["check_task_kinds"]


def check_task_kinds(task: TaskSpec) -> TaskSpec:
    """`task` with its runtime's kind and its harness's and evaluator's kinds and configs
    checked (UnknownKind naming the known kinds, or InvalidKindConfig naming the field: both
    ValueErrors; a harness kind's required task fields too, such as a CLI's instruction),
    each config as its kind's model writes it (defaults filled in)."""
    check_runtime(task.runtime)
    # a multi-step task's instructions are its steps' (each checked, none at the top)
    instructions = [s.instruction for s in task.steps] or [task.instruction]
    for instruction in instructions:
        harness = check_harness(task.harness, instruction).written_into(task.harness)
    steps = [
        s.model_copy(update={"evaluator": _checked_evaluator(s.evaluator)}) if s.evaluator else s
        for s in task.steps
    ]
    evaluator = _checked_evaluator(task.evaluator)
    return task.model_copy(update={"harness": harness, "evaluator": evaluator, "steps": steps})


def _checked_evaluator(evaluator: EvaluatorSpec) -> EvaluatorSpec:
    config = check_evaluator(evaluator)
    return evaluator if config is None else config.written_into(evaluator)

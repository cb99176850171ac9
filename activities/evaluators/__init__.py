"""Evaluators by kind: `command`, `swebench`, `harbor` (`EvaluatorSpec.kind`; `none` has none).

Each kind owns one folder (activities/evaluators/<kind>/): its evaluator (base.py:
`Evaluator`: whether it needs a fresh runtime, which the workflow prewarms while the
harness runs, and whether it reads the session's traces), its config model (`config_model`,
an `EvaluatorConfig`: what the task spec holds under the key the kind names) and its report
model (`report_model`). The `evaluate` activity looks the kind up here; `check_evaluator`
validates a spec's kind and config (the worker, `polar submit`, `polar tasks load`); every
list of kinds or reports is derived from `EVALUATORS` (a `Registry`, polar/registry.py). A new
evaluator is its folder and one line: `EVALUATORS.register("mine", MyEvaluator())`.

`rubric` is no kind: it sits beside any kind (`EvaluatorSpec.rubric`), and after that
kind's evaluator has graded, `evaluate` adds a judge model's score to its reward
(activities/evaluators/rubric.py).
"""

from __future__ import annotations

from activities.evaluators.base import (
    Evaluation,
    EvaluationJob,
    Evaluator,
    EvaluatorConfig,
    EvaluatorError,
)
from activities.evaluators.command import CommandEvaluator
from activities.evaluators.harbor import HarborEvaluator
from activities.evaluators.swebench import SweBenchEvaluator
from activities.kind_configs import InvalidKindConfig, validated_config
from polar.evaluation_reports import EvaluationReport
from polar.registry import Registry, UnknownKind
from polar.tasks.evaluator_spec import NO_EVALUATOR
from polar.tasks.spec import EvaluatorSpec

__all__ = [
    "EVALUATORS",
    "Evaluation",
    "EvaluationJob",
    "Evaluator",
    "EvaluatorConfig",
    "EvaluatorError",
    "InvalidKindConfig",
    "UnknownEvaluator",
    "check_evaluator",
    "get_evaluator",
    "kinds_needing_fresh_runtime",
    "parse_report",
]


class UnknownEvaluator(UnknownKind):
    """No evaluator serves this kind (a spec from newer code, or a typo past validation)."""


EVALUATORS: Registry[Evaluator] = Registry(
    "evaluator kind",
    {e.kind: e for e in (CommandEvaluator(), SweBenchEvaluator(), HarborEvaluator())},
    UnknownEvaluator,
)
"""Every evaluator, by the `EvaluatorSpec.kind` it serves (polar/registry.py)."""


def get_evaluator(kind: str) -> Evaluator:
    """The evaluator of `kind` (UnknownEvaluator, naming it and the known kinds, otherwise)."""
    return EVALUATORS.get(kind)


def kinds_needing_fresh_runtime() -> frozenset[str]:
    """The evaluator kinds graded in a fresh runtime (the ones the workflow prewarms)."""
    return frozenset(kind for kind, e in EVALUATORS.items() if e.needs_fresh_runtime)


def check_evaluator(spec: EvaluatorSpec) -> EvaluatorConfig | None:
    """The config of `spec`'s kind, validated by the kind's own model (None for `none`):
    UnknownEvaluator naming the known kinds, or InvalidKindConfig naming each problem's
    place (`evaluator.swebench.base_commit: ...`). Run by the worker before it grades and by
    the CLI before it submits; never in workflow code."""
    if spec.kind == NO_EVALUATOR:
        return None
    try:
        evaluator = EVALUATORS.get(spec.kind)
    except UnknownEvaluator as exc:
        message = f"evaluator.kind: {exc}, or {NO_EVALUATOR!r} (not graded)"
        raise UnknownEvaluator(message, exc.kind, exc.known) from None
    model = evaluator.config_model
    return validated_config(model, model.written(spec), model.where(spec))


def parse_report(kind: str, data: bytes | str) -> EvaluationReport:
    """A stored `{kind}-report.json`, parsed with its kind's `report_model` (ValueError:
    unknown kind, or not a report)."""
    return EVALUATORS.get(kind).report_model.model_validate_json(data)

"""Evaluators by kind: `command`, `swebench`, `harbor` (`EvaluatorSpec.kind`; `none` has none).

Each evaluator (activities/evaluators/base.py: `Evaluator`) says whether it
needs a fresh runtime (the workflow prewarms one while the harness runs) and
whether it reads the session's traces; its report is a typed model
(polar/evaluation_reports.py). The `evaluate` activity looks the kind up here. A new
evaluator joins the tuple in `EVALUATORS` (a `Registry`, polar/registry.py).

`rubric` is no kind: it sits beside any kind (`EvaluatorSpec.rubric`), and after that
kind's evaluator has graded, `evaluate` adds a judge model's score to its reward
(activities/evaluators/rubric.py).
"""

from __future__ import annotations

from activities.evaluators.base import Evaluation, EvaluationJob, Evaluator, EvaluatorError
from activities.evaluators.command import CommandEvaluator
from activities.evaluators.harbor import HarborEvaluator
from activities.evaluators.swebench import SweBenchEvaluator
from polar.registry import Registry, UnknownKind

__all__ = [
    "EVALUATORS",
    "Evaluation",
    "EvaluationJob",
    "Evaluator",
    "EvaluatorError",
    "UnknownEvaluator",
    "get_evaluator",
    "kinds_needing_fresh_runtime",
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

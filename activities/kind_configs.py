"""A kind's config checked by the kind's own model (evaluators, harnesses): one error, whose
message says where in the task spec each problem is."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["InvalidKindConfig", "validated_config"]

M = TypeVar("M", bound=BaseModel)


class InvalidKindConfig(ValueError):
    """A kind's config does not validate against the kind's model."""


def validated_config(model: type[M], written: dict[str, Any] | None, where: str) -> M:
    """`written` (None: nothing written) validated by `model`; InvalidKindConfig naming each
    problem by its path under `where` (`evaluator.swebench.base_commit: ...`)."""
    try:
        return model.model_validate(written or {})
    except ValidationError as exc:
        problems = [
            f"{'.'.join([where, *(str(p) for p in e['loc'])])}: {e['msg']}" for e in exc.errors()
        ]
        raise InvalidKindConfig("; ".join(problems)) from None

"""Workflow input, validated in the workflow: a bad input fails the workflow at once.

A workflow takes its input as plain JSON and parses it here, rather than
letting the data converter decode it: a decoding error would fail the workflow
*task*, which Temporal retries forever. An input started by hand (`temporal
workflow start`) is held to the same rules as one from the SDK.
"""

from __future__ import annotations

from typing import Any, TypeVar

from temporalio import workflow

from polar.contracts import invalid_input

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def parse_input(model: type[M], raw: Any, error_type: str) -> M:
    """`raw` as `model`, or a non-retryable ApplicationError of `error_type` naming each
    invalid field."""
    if isinstance(raw, model):
        return raw
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise invalid_input(f"invalid {model.__name__}: {problems}", error_type) from None

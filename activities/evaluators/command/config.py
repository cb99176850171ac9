"""The `command` evaluator's config: the spec's top-level `command` and `reward_command`."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from activities.evaluators.base import EvaluatorConfig
from polar.tasks.spec import EvaluatorSpec


class CommandConfig(EvaluatorConfig):
    """`{"kind": "command", "command": "...", "reward_command": "..."}`: the two fields sit
    at the evaluator's top level, where tasks have always written them."""

    command: str = Field(min_length=1, description="exit code 0 means reward 1, else 0")
    reward_command: str | None = Field(
        default=None, description="computes the reward instead (EvaluatorSpec.reward_command)"
    )

    @classmethod
    def written(cls, spec: EvaluatorSpec) -> dict[str, Any] | None:
        """The top-level `command` and `reward_command` that are set."""
        fields = {"command": spec.command, "reward_command": spec.reward_command}
        return {k: v for k, v in fields.items() if v is not None} or None

    @classmethod
    def where(cls, spec: EvaluatorSpec) -> str:
        return "evaluator"

    def written_into(self, spec: EvaluatorSpec) -> EvaluatorSpec:
        """`spec` as it is: its top-level fields are the config."""
        return spec

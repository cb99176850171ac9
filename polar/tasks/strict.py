"""What every part of the task spec shares: strict models (unknown fields are errors), specs
naming a kind with its config, the longest timeout, and the check of values git will read."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class StrictModel(BaseModel):
    """Base for user-facing specs: unknown fields are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class KindSpec(StrictModel):
    """A spec naming a `kind` (harness, evaluator): what every kind shares is declared here,
    and a kind's own config goes under the key its name gives (`{"kind": "swebench",
    "swebench": {...}}`), kept as written JSON. The kind's own model checks it where the
    kinds are registered (activities/), never while a workflow decodes its input; any other
    undeclared key is an error."""

    # a kind's config under the key its name gives (checked in `_config_under_its_kind`)
    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, dict[str, Any]] = Field(init=False)

    kind: str

    @model_validator(mode="before")
    @classmethod
    def _config_under_its_kind(cls, data: Any) -> Any:
        """A key the spec does not declare is the kind's config, named by the kind."""
        if not isinstance(data, dict):
            return data
        kind = data.get("kind", cls.model_fields["kind"].default)
        for key in data:
            if key in cls.model_fields or key == kind:
                continue
            raise ValueError(
                f"unknown field {key!r}: a kind's config goes under the key named by "
                f"'kind' (here {kind!r})"
            )
        return data

    def kind_config(self) -> dict[str, Any] | None:
        """The config the kind's name keys, as written (None where there is none)."""
        if self.kind in type(self).model_fields:
            value = getattr(self, self.kind)
            return value if isinstance(value, dict) else None
        return (self.model_extra or {}).get(self.kind)


MAX_TIMEOUT_S = 7 * 86400
"""The longest any stage, action or container may be given (finite: timers must fit)."""
GIT_HELPER = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")


def git_arg(value: str, what: str) -> str:
    """A git url or ref git cannot read as an option: not empty, no control characters or
    surrounding blanks, no leading '-'."""
    if not value or value != value.strip() or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(
            f"{what} {value!r:.80} must be non-empty, without control characters "
            "or surrounding blanks"
        )
    if value.startswith("-"):
        raise ValueError(f"{what} {value!r:.80} starts with '-': git would read it as an option")
    return value

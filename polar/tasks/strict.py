"""What every part of the task spec shares: strict models (unknown fields are errors), the
longest timeout, and the check of values git will read."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base for user-facing specs: unknown fields are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


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

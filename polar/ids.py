"""Task, session and workflow ids: the one check for every place an id becomes a path, a key
or a workflow's name."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import (
    AfterValidator,
    Field,
)

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
"""The one id grammar (with `checked_id`'s no-'..' rule), for task, session and workflow ids:
they become file names, S3 key segments and Temporal workflow ids, so no '/', no leading '.'
or '-', at most 200 characters."""
TASK_ID_MAX = 128
"""A task id leaves room for what its session ids add (`-{nonce}-s{i}`, `-eval`)."""


class InvalidId(ValueError):
    """A task or session id that is not safe as a file name or an S3 key segment."""


def checked_id(value: object, what: str = "id") -> str:
    """`value` if it is a safe id (ID_PATTERN, no '..'), else InvalidId naming it.

    The one check for every place an id becomes a path or a key: storage keys,
    runtime dirs, session keys, workflow input.
    """
    if not isinstance(value, str) or not re.fullmatch(ID_PATTERN, value) or ".." in value:
        raise InvalidId(
            f"invalid {what} {value!r:.80}: use 1-200 of A-Z a-z 0-9 . _ -, starting with a "
            "letter or digit, without '..'"
        )
    return value


def checked_workflow_id(value: object) -> str:
    """`value` if it is a valid workflow id (the same grammar: `checked_id`), else InvalidId:
    what `PolarClient.submit(workflow_id=)` and the CLI check before Temporal sees it."""
    return checked_id(value, "workflow id")


def _session_id(value: str) -> str:
    return checked_id(value, "session id")


def _task_id(value: str) -> str:
    return checked_id(value, "task id")


SessionId = Annotated[str, AfterValidator(_session_id)]
TaskId = Annotated[str, Field(max_length=TASK_ID_MAX), AfterValidator(_task_id)]

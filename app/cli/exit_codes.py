"""The `polar` command's exit codes (docs/errors.md says what each means; a test compares).

0-3 and 130 are the codes of every command; 4-6 are the verdicts of `polar submit` (when it
follows its tasks) and `polar result` (polar/verdicts.py), which `--json` names too. Cheap to
import (the CLI's start reads it): the verdicts are keyed by their names."""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """Why `polar` ended."""

    OK = 0
    ERROR = 1
    INVALID_INPUT = 2
    REFUSED = 3
    TASK_ERROR = 4
    INFRA_ERROR = 5
    NONE_COMPLETED = 6
    INTERRUPTED = 130


VERDICT_CODES: dict[str, ExitCode] = {
    "ok": ExitCode.OK,
    "task_error": ExitCode.TASK_ERROR,
    "infra_error": ExitCode.INFRA_ERROR,
    "none_completed": ExitCode.NONE_COMPLETED,
}
"""The exit code of each verdict (polar.verdicts.Verdict, by its value)."""


def verdict_fields(verdict: str) -> dict[str, Any]:
    """What `--json` output adds: the verdict's name and the exit code it gives."""
    return {"verdict": str(verdict), "exit_code": int(VERDICT_CODES[verdict])}

"""A task's verdict for scripts: did its sessions say something about the policy, or why not.

A session that ended `ok`, `policy_failure` or `timeout` (polar/outcomes.py) gave a verdict
on the policy: it completed, whatever its reward. One that ended `task_error` or
`infra_error` gave none, and a cancelled one has no outcome at all. A task's verdict is the
worst of its sessions' in this order:

* `task_error`: a session ended `task_error` (the task cannot run: fix the task);
* `infra_error`: a session ended `infra_error` (the stack failed it: fix or retry the stack);
* `none_completed`: no session completed (every one cancelled, or the task ended without a
  result);
* `ok`: at least one session completed, and none ended in an error.

`polar submit` and `polar result` exit with the verdict's code (app/cli/exit_codes.py) and
name it in their `--json` output; a trainer's script can call `task_verdict` itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from polar.contracts import SessionResult, TaskResult
from polar.outcomes import TASK_ERRORS, SessionOutcome
from polar.records import OutcomeClass


class Verdict(StrEnum):
    """What a task's (or a session's) end tells a script, worst first."""

    TASK_ERROR = "task_error"
    INFRA_ERROR = "infra_error"
    NONE_COMPLETED = "none_completed"
    OK = "ok"


WORST_FIRST: tuple[Verdict, ...] = tuple(Verdict)
"""The verdicts from worst to best: several tasks' verdict is the first any of them has."""

COMPLETED = frozenset({OutcomeClass.OK, OutcomeClass.POLICY_FAILURE, OutcomeClass.TIMEOUT})
"""Outcome classes of a session that completed: a verdict on the policy, whatever its reward."""


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The worst of `verdicts` (`none_completed` when there are none)."""
    found = set(verdicts)
    return next((v for v in WORST_FIRST if v in found), Verdict.NONE_COMPLETED)


def outcomes_verdict(outcomes: Iterable[SessionOutcome | None]) -> Verdict:
    """The verdict of sessions that ended with these outcomes (None: cancelled)."""
    classes = {o.outcome for o in outcomes if o is not None}
    if OutcomeClass.TASK_ERROR in classes:
        return Verdict.TASK_ERROR
    if OutcomeClass.INFRA_ERROR in classes:
        return Verdict.INFRA_ERROR
    return Verdict.OK if classes & COMPLETED else Verdict.NONE_COMPLETED


def task_verdict(result: TaskResult) -> Verdict:
    """The verdict of a finished task (the module docstring)."""
    return outcomes_verdict(s.outcome for s in result.sessions)


def session_verdict(result: SessionResult) -> Verdict:
    """The verdict of one finished session."""
    return outcomes_verdict([result.outcome])


def failure_verdict(error_type: str | None) -> Verdict:
    """The verdict of a task whose workflow ended without a result: `task_error` when its
    error type says the task cannot work (polar.outcomes.TASK_ERRORS), else `none_completed`
    (it failed, was cancelled or terminated)."""
    return Verdict.TASK_ERROR if error_type in TASK_ERRORS else Verdict.NONE_COMPLETED

"""A task's verdict (polar/verdicts.py): the worst of its sessions', errors before nothing."""

from __future__ import annotations

import pytest

from polar.contracts import SessionResult, TaskResult
from polar.verdicts import Verdict, failure_verdict, session_verdict, task_verdict, worst


def session(status: str, **fields: object) -> SessionResult:
    return SessionResult(session_id="s", task_id="t", index=0, status=status, harness="h", **fields)


OK = session("completed", reward=1.0)
GRADED_ZERO = session("completed", reward=0.0)  # policy_failure: completed all the same
FAILED = session("harness_failed")
TIMED_OUT = session("timeout")
TASK_ERROR = session("error", error_type="InvalidSource", error_stage="prepare")
IMAGE_MISSING = session("error", error_type="ImageMissing", error_stage="prepare")
INFRA_ERROR = session("harness_failed", harness_started=False)
CANCELLED = session("cancelled")


@pytest.mark.parametrize(
    ("sessions", "verdict"),
    [
        ([OK], Verdict.OK),
        ([GRADED_ZERO, FAILED, TIMED_OUT], Verdict.OK),  # verdicts on the policy, all of them
        ([OK, CANCELLED], Verdict.OK),  # an early stop's stragglers
        ([OK, TASK_ERROR], Verdict.TASK_ERROR),
        ([IMAGE_MISSING], Verdict.TASK_ERROR),
        ([OK, INFRA_ERROR], Verdict.INFRA_ERROR),
        ([INFRA_ERROR, TASK_ERROR], Verdict.TASK_ERROR),  # the task is broken first
        ([CANCELLED, CANCELLED], Verdict.NONE_COMPLETED),
        ([], Verdict.NONE_COMPLETED),
    ],
)
def test_a_tasks_verdict_is_its_worst_sessions(
    sessions: list[SessionResult], verdict: Verdict
) -> None:
    assert task_verdict(TaskResult(task_id="t", sessions=sessions)) == verdict


def test_a_sessions_verdict() -> None:
    assert session_verdict(GRADED_ZERO) == Verdict.OK
    assert session_verdict(INFRA_ERROR) == Verdict.INFRA_ERROR
    assert session_verdict(CANCELLED) == Verdict.NONE_COMPLETED


def test_a_task_without_a_result() -> None:
    assert failure_verdict("InvalidTaskSpec") == Verdict.TASK_ERROR
    assert failure_verdict(None) == Verdict.NONE_COMPLETED  # cancelled, terminated
    assert failure_verdict("RuntimeError") == Verdict.NONE_COMPLETED


def test_several_tasks_give_the_worst() -> None:
    assert worst([Verdict.OK, Verdict.NONE_COMPLETED]) == Verdict.NONE_COMPLETED
    assert worst([Verdict.NONE_COMPLETED, Verdict.INFRA_ERROR]) == Verdict.INFRA_ERROR
    assert worst([Verdict.INFRA_ERROR, Verdict.TASK_ERROR, Verdict.OK]) == Verdict.TASK_ERROR
    assert worst([]) == Verdict.NONE_COMPLETED

"""Outcome classes: every session end gets the class that is true to what happened."""

from __future__ import annotations

import pytest

from polar import search_attributes as sa
from polar.contracts import SessionResult, TaskResult
from polar.outcomes import HOST_LOST, classify
from polar.records import InfraReason, OutcomeClass, SessionStatus


def result(status: str, **fields: object) -> SessionResult:
    return SessionResult(session_id="s", task_id="t", index=0, status=status, harness="h", **fields)


@pytest.mark.parametrize(
    ("fields", "outcome", "reason"),
    [
        ({"status": "completed", "reward": 1.0}, OutcomeClass.OK, None),
        ({"status": "completed"}, OutcomeClass.OK, None),  # no evaluator
        ({"status": "completed", "reward": 0.0}, OutcomeClass.POLICY_FAILURE, None),
        ({"status": "harness_failed", "reward": 0.0}, OutcomeClass.POLICY_FAILURE, None),
        ({"status": "timeout"}, OutcomeClass.TIMEOUT, None),
        # no started marker: the sandbox never got to the harness
        (
            {"status": "harness_failed", "harness_started": False},
            OutcomeClass.INFRA_ERROR,
            InfraReason.SANDBOX_START,
        ),
        # calls nobody served, then the harness gave up
        (
            {"status": "harness_failed", "harness_started": True, "unserved_calls": 3},
            OutcomeClass.INFRA_ERROR,
            InfraReason.INFERENCE_BACKEND,
        ),
        # of which the gateway itself failed some (unreachable, could not record)
        (
            {
                "status": "harness_failed",
                "harness_started": True,
                "unserved_calls": 3,
                "unserved_by_gateway": 1,
            },
            OutcomeClass.INFRA_ERROR,
            InfraReason.GATEWAY,
        ),
        # unserved calls the harness got over are no fault of the outcome
        ({"status": "completed", "unserved_calls": 3, "reward": 1.0}, OutcomeClass.OK, None),
        (
            {"status": "error", "error_type": "RuntimeUnfit", "error_stage": "prepare"},
            OutcomeClass.INFRA_ERROR,
            InfraReason.IMAGE,
        ),
        # an image the worker does not hold: the task's, said once (issue 37)
        (
            {"status": "error", "error_type": "ImageMissing", "error_stage": "prepare"},
            OutcomeClass.TASK_ERROR,
            None,
        ),
        (
            {"status": "error", "error_type": HOST_LOST, "error_stage": "run"},
            OutcomeClass.INFRA_ERROR,
            InfraReason.LOST_HOST,
        ),
        (
            {"status": "error", "error_type": "EndpointConnectionError", "error_stage": "build"},
            OutcomeClass.INFRA_ERROR,
            InfraReason.STORAGE,
        ),
        (  # obstore's error when S3 is down, in any stage: storage, not the stage's part
            {"status": "error", "error_type": "GenericError", "error_stage": "evaluate"},
            OutcomeClass.INFRA_ERROR,
            InfraReason.STORAGE,
        ),
        (
            {"status": "error", "error_type": "RuntimeError", "error_stage": "evaluate"},
            OutcomeClass.INFRA_ERROR,
            InfraReason.EVALUATOR_HOST,
        ),
        (
            {"status": "error", "error_type": "InvalidHarness", "error_stage": "run"},
            OutcomeClass.TASK_ERROR,
            None,
        ),
        (  # the task cannot be graded (a test patch that does not apply): no verdict, no retry
            {"status": "error", "error_type": "EvaluatorError", "error_stage": "evaluate"},
            OutcomeClass.TASK_ERROR,
            None,
        ),
    ],
)
def test_each_end_gets_its_class(
    fields: dict[str, object], outcome: OutcomeClass, reason: InfraReason | None
) -> None:
    got = result(**fields).outcome  # type: ignore[arg-type]
    assert got is not None
    assert (got.outcome, got.reason) == (outcome, reason)


def test_a_cancelled_session_has_no_outcome() -> None:
    assert classify(SessionStatus.CANCELLED) is None
    assert sa.outcome_values(None) == []


def test_the_outcome_travels_with_the_result_and_is_recomputed_from_its_fields() -> None:
    session = result("harness_failed", harness_started=False)
    dumped = session.model_dump(mode="json")
    assert dumped["outcome"]["outcome"] == "infra_error"
    assert dumped["outcome"]["reason"] == "sandbox_start"
    dumped["outcome"] = {"outcome": "ok"}  # what is stored is never trusted over the fields
    again = SessionResult.model_validate(dumped).outcome
    assert again is not None and again.reason == InfraReason.SANDBOX_START
    assert sa.outcome_values(again) == ["infra_error", "infra_error:sandbox_start"]


def test_the_task_result_counts_sessions_per_class() -> None:
    task = TaskResult(
        task_id="t",
        sessions=[
            result("completed", reward=1.0),
            result("completed", reward=0.0),
            result("harness_failed", harness_started=False),
            result("error", error_type="ClientError", error_stage="score"),
            result("cancelled"),
        ],
    )
    assert task.model_dump()["outcome_counts"] == {
        "ok": 1,
        "policy_failure": 1,
        "infra_error": 2,
        "infra_error:sandbox_start": 1,
        "infra_error:storage": 1,
    }

"""Infra errors retry on fresh ground and never score (issue 22): the real Session and
RolloutTask workflows on the suite's Temporal, with the stub activities of
test_workflow_branches scripted to fail the way the stack fails.

* a run that never reached the harness (no started marker) is run again on a fresh
  runtime (the first one released, the session not closed), under attempts of its own;
* a harness that keeps failing after calls the gateway could not serve is run again up
  to `infra_errors.retries`, then ends `infra_error` with no reward (never the 1.0 its
  evaluator gave, never 0);
* `infra_errors.group: shrink` runs nothing again;
* an image refused at prepare (`RuntimeUnfit`) is `infra_error` (image), retried too;
* the evaluator failing on the worker's side (after the stage's own retries) runs the
  session again from prepare, and only the new run's records become traces; a task that
  cannot be graded (`EvaluatorError`) is a `task_error`, run once;
* a stage failing after the runtimes' early teardown closed the session is not run again.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from app.devstack import DevStack
from polar.contracts import (
    EvaluateRequest,
    HarnessRequest,
    HarnessResult,
    PrepareRequest,
    ScoreRequest,
)
from polar.records import InfraReason, OutcomeClass, SessionStatus
from polar.temporal_client import connect
from tests.integration.test_workflow_branches import (
    Stubs,
    only_session,
    run_task,
    serving,
    task_spec,
)


@pytest.fixture(scope="module")
async def client(devstack: DevStack) -> Client:
    return await connect(devstack.settings)


def harness(request: HarnessRequest, attempt: int, **fields: Any) -> HarnessResult:
    return HarnessResult(
        stdout_key="stub/out",
        stderr_key="stub/err",
        duration_s=0.1,
        attempt=request.attempt_base + attempt,
        **({"status": "failed", "exit_code": 1} | fields),
    )


async def test_a_run_that_never_reached_the_harness_runs_again_on_fresh_ground(
    client: Client,
) -> None:
    stubs = Stubs()
    runs = iter(
        [
            {"harness_started": False},
            {"harness_started": True, "status": "completed", "exit_code": 0},
        ]
    )

    async def sandbox_fails_once(request: HarnessRequest, attempt: int) -> HarnessResult:
        return harness(request, attempt, **next(runs))

    stubs.script["run_harness"] = sandbox_fails_once
    async with serving(client, stubs) as queue:
        spec = task_spec("infra-once", infra_errors={"group": "wait", "retries": 2})
        session = only_session(await run_task(client, queue, spec))
    assert session.status == SessionStatus.COMPLETED and session.reward == 1.0
    assert session.outcome is not None and session.outcome.outcome == OutcomeClass.OK
    [earlier] = session.infra_attempts
    assert earlier.startswith("infra_error:sandbox_start")
    assert stubs.attempts("prepare_runtime", session.session_id) == [1, 1]
    # the first runtime released without closing the session; the second run counts on
    assert stubs.sessions_of("release_runtime") >= {session.session_id}
    bases = [r.attempt_base for name, r in stubs.requests if name == "run_harness"]
    assert len(bases) == 2 and bases[1] > bases[0]
    # the host's own fault: the next prepare avoids it (declined there twice of its 3 tries)
    prepares = [r for name, r in stubs.requests if name == "prepare_runtime"]
    assert [(p.avoid_hosts, p.avoid_tries) for p in prepares] == [([], 0), (["stub"], 2)]
    assert stubs.sessions_of("build_trajectory") == {session.session_id}  # built once


async def test_an_infra_error_that_stays_ends_infra_error_without_a_reward(
    client: Client,
) -> None:
    stubs = Stubs()

    async def starved(request: HarnessRequest, attempt: int) -> HarnessResult:
        return harness(request, attempt, harness_started=True, unserved_calls=2)

    stubs.script["run_harness"] = starved
    async with serving(client, stubs) as queue:
        spec = task_spec("infra-stays", infra_errors={"group": "wait", "retries": 1})
        result = await run_task(client, queue, spec)
    session = only_session(result)
    assert session.outcome is not None
    assert (session.outcome.outcome, session.outcome.reason) == (
        OutcomeClass.INFRA_ERROR,
        InfraReason.INFERENCE_BACKEND,
    )
    assert session.reward is None  # the evaluator's 1.0 withheld: never a verdict, never 0
    assert any("withheld" in w for w in session.warnings)
    assert len(session.infra_attempts) == 1
    assert len(stubs.attempts("run_harness", session.session_id)) == 2
    assert result.outcome_counts == {"infra_error": 1, "infra_error:inference_backend": 1}
    # a shared service's fault (the backend): no host is avoided
    prepares = [r for name, r in stubs.requests if name == "prepare_runtime"]
    assert all(p.avoid_hosts == [] for p in prepares)
    [score] = [r for name, r in stubs.requests if name == "score_traces"]
    assert score.reward is None


async def test_shrink_runs_nothing_again(client: Client) -> None:
    stubs = Stubs()

    async def starved(request: HarnessRequest, attempt: int) -> HarnessResult:
        return harness(request, attempt, harness_started=True, unserved_calls=1)

    stubs.script["run_harness"] = starved
    async with serving(client, stubs) as queue:
        spec = task_spec("infra-shrink", infra_errors={"group": "shrink"})
        session = only_session(await run_task(client, queue, spec))
    assert session.outcome is not None and session.outcome.is_infra
    assert session.infra_attempts == []
    assert len(stubs.attempts("run_harness", session.session_id)) == 1
    assert any("withheld" in w for w in session.warnings)  # its grade was 1.0


async def test_an_image_refused_at_prepare_is_an_image_fault(client: Client) -> None:
    stubs = Stubs()

    async def unfit(request: PrepareRequest, attempt: int) -> None:
        raise ApplicationError(
            "docker image 'user/img' lacks what the sandbox needs: python3",
            type="RuntimeUnfit",
            non_retryable=True,
        )

    stubs.script["prepare_runtime"] = unfit
    async with serving(client, stubs) as queue:
        spec = task_spec("infra-image", infra_errors={"group": "wait", "retries": 1})
        session = only_session(await run_task(client, queue, spec))
    assert session.status == SessionStatus.ERROR
    assert (session.error_type, session.error_stage) == ("RuntimeUnfit", "prepare")
    assert session.outcome is not None and session.outcome.reason == InfraReason.IMAGE
    assert len(stubs.attempts("prepare_runtime", session.session_id)) == 2
    assert session.reward is None


async def test_an_evaluator_failing_on_the_host_runs_the_session_again(client: Client) -> None:
    stubs = Stubs()

    async def host_side_on_the_first_ground(request: EvaluateRequest, attempt: int) -> None:
        if len(stubs.attempts("prepare_runtime", request.session_id)) < 2:  # every try there
            raise ApplicationError("[Errno 28] No space left on device", type="OSError")

    stubs.script["evaluate"] = host_side_on_the_first_ground
    async with serving(client, stubs) as queue:
        spec = task_spec(
            "infra-eval",
            infra_errors={"group": "wait", "retries": 1},
            timeouts={"max_attempts": 2},
        )
        session = only_session(await run_task(client, queue, spec))
    assert session.status == SessionStatus.COMPLETED and session.reward == 1.0, session
    [earlier] = session.infra_attempts
    assert earlier.startswith("infra_error:evaluator_host"), earlier
    assert len(stubs.attempts("prepare_runtime", session.session_id)) == 2
    assert len(stubs.attempts("run_harness", session.session_id)) == 2
    assert len(stubs.attempts("evaluate", session.session_id)) == 3  # 2 tries, then 1
    # the second build reads only the second placement's run
    builds = [r for name, r in stubs.requests if name == "build_trajectory"]
    runs = [r for name, r in stubs.requests if name == "run_harness"]
    assert [b.after_attempt for b in builds] == [r.attempt_base for r in runs]
    assert builds[1].after_attempt > 0


async def test_a_task_that_cannot_be_graded_is_a_task_error_run_once(client: Client) -> None:
    stubs = Stubs()

    async def ungradable(request: EvaluateRequest, attempt: int) -> None:
        raise ApplicationError(
            "the test patch does not apply", type="EvaluatorError", non_retryable=True
        )

    stubs.script["evaluate"] = ungradable
    async with serving(client, stubs) as queue:
        spec = task_spec("eval-task-error", infra_errors={"group": "wait", "retries": 2})
        session = only_session(await run_task(client, queue, spec))
    assert session.status == SessionStatus.ERROR and session.reward is None
    assert session.outcome is not None and session.outcome.outcome == OutcomeClass.TASK_ERROR
    assert session.infra_attempts == []
    assert len(stubs.attempts("evaluate", session.session_id)) == 1


async def test_a_stage_failing_after_the_session_closed_is_not_run_again(
    client: Client,
) -> None:
    """Score fails on S3 after the runtimes' early teardown closed the session at the gateway:
    a rerun's harness would be refused (403 session_closed), so it ends infra_error (storage),
    no reward, nothing run again."""
    stubs = Stubs()

    async def s3_down(request: ScoreRequest, attempt: int) -> None:
        raise ApplicationError("Generic S3 error: connection refused", type="GenericError")

    stubs.script["score_traces"] = s3_down
    async with serving(client, stubs) as queue:
        spec = task_spec(
            "infra-closed",
            infra_errors={"group": "wait", "retries": 2},
            timeouts={"max_attempts": 2},
        )
        session = only_session(await run_task(client, queue, spec))
    assert session.status == SessionStatus.ERROR and session.reward is None
    assert session.outcome is not None
    assert (session.outcome.outcome, session.outcome.reason) == (
        OutcomeClass.INFRA_ERROR,
        InfraReason.STORAGE,
    )
    assert session.infra_attempts == []
    assert len(stubs.attempts("run_harness", session.session_id)) == 1
    assert any("withheld" in w for w in session.warnings)  # its grade was 1.0

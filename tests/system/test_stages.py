"""The stage table (workflows/stages.py) is the one definition of a stage.

Queue names derive from the pools (that the worker serves exactly the table's
activities, each on its pool: tests/unit/activities/test_pool_activities.py); the
retry rule lists the one set of non-retryable error types; `score` is a stage with
its own time in a real session's result.
"""

from __future__ import annotations

import os

import pytest

from app.cli.demo import demo_task
from polar.client.sdk import PolarClient
from polar.contracts import NON_RETRYABLE_ERRORS, Stage, invalid_input
from polar.records import SessionStatus
from polar.tasks.spec import Timeouts
from tests.support.paths import HISTORIES, REPO
from workflows import replay as rp
from workflows import stages
from workflows.queues import HostQueues, Queues
from workflows.stages import POOLS, STAGE_ACTIVITIES, Pool


def test_every_session_stage_has_activities_and_score_is_one() -> None:
    staged = {s.stage for s in STAGE_ACTIVITIES.values() if s.stage is not None}
    assert staged == set(Stage) - {Stage.PENDING, Stage.DONE}
    assert stages.SCORE_TRACES.stage == Stage.SCORE
    # stages that touch the runtime follow it; S3-only stages stay on the shared queues
    assert not stages.BUILD_TRAJECTORY.on_host and not stages.SCORE_TRACES.on_host
    assert stages.RUN_HARNESS.on_host and stages.EVALUATE.on_host and stages.TEARDOWN.on_host


def test_queue_names_derive_from_the_pools() -> None:
    queues = Queues.for_workflow_queue("q")
    assert queues.by_pool() == {
        "workflow": "q",
        "init": "q-init",
        "run": "q-run",
        "postrun": "q-postrun",
    }
    host = HostQueues.for_host("q", "h1")
    assert host.by_pool() == {p.value: f"q-host-h1-{p.value}" for p in POOLS}
    assert host.of(None) == "q-host-h1" and host.of(Pool.RUN) == "q-host-h1-run"


def test_timeouts_and_retries_come_from_the_task() -> None:
    t = Timeouts(harness_s=100, evaluate_s=50, build_s=7, max_attempts=4)
    assert stages.RUN_HARNESS.start_to_close(t).total_seconds() == 100 + stages.HARNESS_BACKSTOP_S
    assert stages.EVALUATE.start_to_close(t).total_seconds() == 50 + stages.EVALUATE_BACKSTOP_S
    assert stages.SCORE_TRACES.start_to_close(t).total_seconds() == 7
    policy = stages.BUILD_TRAJECTORY.retry_policy(t)
    assert policy.maximum_attempts == 4
    assert tuple(policy.non_retryable_error_types or ()) == NON_RETRYABLE_ERRORS
    assert stages.TEARDOWN.retry_policy(t).maximum_attempts == stages.RELEASE_ATTEMPTS
    assert stages.HOST_ALIVE.retry_policy(t).maximum_attempts == 1


def test_invalid_input_is_the_only_non_retryable_error() -> None:
    error = invalid_input("no such ref", "InvalidSource")
    assert error.non_retryable and error.type == "InvalidSource"
    with pytest.raises(ValueError, match="not in NON_RETRYABLE_ERRORS"):
        invalid_input("flaky network", "NetworkHiccup")


@pytest.mark.slow
async def test_a_session_books_score_to_its_own_stage(polar: PolarClient, gateway: str) -> None:
    spec = demo_task(sessions=1).model_copy(deep=True)
    spec.harness.env = {"DEMO_TURNS": "2", "DEMO_PAUSE_S": "0", "DEMO_STREAM_TURNS": ""}
    result = await polar.wait(await polar.submit(spec), timeout_s=300)
    (session,) = result.sessions
    assert session.status == SessionStatus.COMPLETED, session.error
    assert session.num_traces > 0
    stages_seen = set(session.stage_seconds)
    assert stages_seen == {"prepare", "run", "build", "evaluate", "score", "teardown"}
    # its history (with the score-stage patch) replays; stored as tests/histories/
    # session-scored.json with POLAR_RECORD_HISTORIES=1
    history = await rp.fetch_history(polar.client, session.session_id)
    report = await rp.replay(history)
    assert report.ok, report.explanation
    if os.environ.get("POLAR_RECORD_HISTORIES"):
        rp.save_history(history, HISTORIES / "session-scored.json")


def test_non_retryable_is_decided_in_one_place() -> None:
    """Stages raise non-retryable errors only through `invalid_input` (one list); a transient
    failure such as an unreachable git remote stays retryable."""
    root = REPO
    flagged = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("activities", "workflows", "proxy")
        for path in sorted((root / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "non_retryable=True" in line
    ]
    assert flagged == []
    assert "SourceUnavailable" not in NON_RETRYABLE_ERRORS

"""The session page's stage timeline (from history events) and its S3 objects sorted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from app.console.session_objects import sort_artifacts, summarize_trace
from app.console.session_page import stage_steps

T0 = datetime(2026, 1, 1, tzinfo=UTC)
E = EventType


def event(event_id: int, kind: int, at_s: float, **attrs: object) -> HistoryEvent:
    ev = HistoryEvent(event_id=event_id, event_type=kind)  # type: ignore[arg-type]
    ev.event_time.FromDatetime(T0 + timedelta(seconds=at_s))
    field = {
        E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "activity_task_scheduled_event_attributes",
        E.EVENT_TYPE_ACTIVITY_TASK_STARTED: "activity_task_started_event_attributes",
        E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
        E.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    }[kind]
    target = getattr(ev, field)
    for name, value in attrs.items():
        if name == "activity":
            target.activity_type.name = value
        elif name == "queue":
            target.task_queue.name = value
        elif name == "message":
            target.failure.message = value
        else:
            setattr(target, name, value)
    return ev


def test_stage_steps_have_their_stage_queue_worker_attempts_and_times() -> None:
    events = [
        event(5, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 0, activity="prepare_runtime",
              queue="q-init"),
        event(6, E.EVENT_TYPE_ACTIVITY_TASK_STARTED, 0.1, scheduled_event_id=5, attempt=1,
              identity="1@vm"),
        event(7, E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, 2.5, scheduled_event_id=5),
        event(8, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 3, activity="run_harness",
              queue="q-host-h1-run"),
        event(9, E.EVENT_TYPE_ACTIVITY_TASK_STARTED, 9, scheduled_event_id=8, attempt=3,
              identity="2@h1"),
        event(10, E.EVENT_TYPE_ACTIVITY_TASK_FAILED, 10, scheduled_event_id=8,
              message="engine said no"),
        event(11, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 11, activity="build_trajectory",
              queue="q-postrun"),
    ]  # fmt: skip
    prepare, run, build = stage_steps(events)
    assert (prepare.stage, prepare.queue, prepare.worker, prepare.attempts) == (
        "prepare",
        "q-init",
        "1@vm",
        1,
    )
    assert prepare.state == "completed" and prepare.seconds == 2.5
    assert (run.stage, run.attempts, run.state, run.failure) == (
        "run",
        3,
        "failed",
        "engine said no",
    )
    assert (build.stage, build.state, build.seconds) == ("build", "scheduled", None)


def test_artifacts_are_sorted_into_logs_reports_and_patches() -> None:
    p = "sessions/s1/artifacts/"
    keys = [
        f"{p}command-model.patch",
        f"{p}command-report.json",
        f"{p}evaluate.stdout",
        f"{p}evaluate.stderr",
        f"{p}harness-attempt1.stdout",
        f"{p}harness-attempt1/artifacts/notes.txt",
    ]
    sorted_ = sort_artifacts("s1", keys)
    assert sorted_.patches == [keys[0]] and sorted_.reports == [keys[1]]
    assert sorted_.eval_logs == keys[2:4] and sorted_.harness_logs == [keys[4]]
    assert sorted_.keys == keys


def test_a_trace_summary_joins_its_sidecar_reward() -> None:
    line = {
        "trace_id": "s1/0",
        "prompt_ids": [1, 2, 3],
        "response_ids": [4, 5, 6, 7],
        "loss_mask": [1, 1, 0, 1],
        "reward": None,
        "provenance": {
            "record_ids": ["r1", "r2"],
            "policy_version": 4,
            "reconstruction": {"started_by": {"kind": "new_context"}},
        },
    }
    summary = summarize_trace(0, line, {"s1/0": 0.5})
    assert (summary.prompt_tokens, summary.response_tokens, summary.trained_tokens) == (3, 4, 3)
    assert (summary.reward, summary.started_by, summary.policy_version) == (0.5, "new_context", 4)
    assert summarize_trace(0, line, None).reward is None


def test_an_open_activity_shows_its_attempt_worker_and_last_failure() -> None:
    from temporalio.api.enums.v1 import PendingActivityState
    from temporalio.api.workflow.v1 import PendingActivityInfo

    from app.console.session_page import with_pending

    scheduled = event(5, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 0, activity="run_harness",
                      queue="q-host-h1-run", activity_id="3")  # fmt: skip
    (step,) = stage_steps([scheduled])
    info = PendingActivityInfo(
        activity_id="3",
        state=PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
        attempt=2,
        last_worker_identity="7@h1",
    )
    info.last_failure.message = "engine said no"
    with_pending([step], [info, PendingActivityInfo(activity_id="9")])
    assert (step.state, step.attempts, step.worker) == ("running", 2, "7@h1")
    assert step.failure == "attempt 1: engine said no"

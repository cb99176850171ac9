"""The Session and RolloutTask workflows' branches, with stub activities: fast, no runtime.

The real workflows (workflows/) run on the suite's real Temporal dev server, in a
worker of this test on a task queue of its own; every activity is a stub
registered under the real activity name (`Stubs`, the one place to adjust when a
stage is renamed or added). A stub answers at once unless the test scripts it
to fail, to time out or to wait for its cancellation. Temporal's time-skipping
test server cannot be downloaded here, so the timeouts are the TaskSpec's own,
set to their 1 s minimum where a branch needs one to expire.

Not covered here: `run_harness` timing out start-to-close (status `timeout`) needs
`harness_s` plus the 120 s backstop (workflows/stages.py) of real time; the harness's
own budget running out (the other way a session ends `timeout`) is.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from app.devstack import DevStack
from polar.contracts import (
    BuildRequest,
    BuildResult,
    EvaluateRequest,
    EvaluateResult,
    HarnessRequest,
    HarnessResult,
    PrepareRequest,
    RuntimeHandle,
    ScoreRequest,
    ScoreResult,
    SessionResult,
    TaskResult,
    TeardownResult,
)
from polar.records import SessionStatus
from polar.tasks.spec import TaskSpec
from polar.temporal_client import connect
from tests.support.polling import wait_for
from workflows.queues import HostQueues, Queues, host_queue_prefix
from workflows.rollout_task import RolloutTask, SessionBatch
from workflows.session import Session

Behaviour = Callable[[Any, int], Awaitable[Any]]
"""A scripted stage: (request, attempt) -> the stage's result (None: the stub's default)."""


@dataclass
class Call:
    activity: str
    session_id: str
    attempt: int


@dataclass
class Stubs:
    """Every stage activity under its real name; what each did is in `calls`/`cancelled`,
    what each was asked in `requests` (activity name, request)."""

    script: dict[str, Behaviour] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    cancelled: list[Call] = field(default_factory=list)
    requests: list[tuple[str, Any]] = field(default_factory=list)

    def attempts(self, name: str, session_id: str | None = None) -> list[int]:
        return [
            c.attempt
            for c in self.calls
            if c.activity == name and (session_id is None or c.session_id == session_id)
        ]

    def sessions_of(self, name: str) -> set[str]:
        return {c.session_id for c in self.calls if c.activity == name}

    async def _answer(self, name: str, session_id: str, request: Any, default: Any) -> Any:
        call = Call(name, session_id, activity.info().attempt)
        self.calls.append(call)
        self.requests.append((name, request))
        behaviour = self.script.get(name)
        if behaviour is None:
            return default
        try:
            answer = await behaviour(request, call.attempt)
        except asyncio.CancelledError:
            self.cancelled.append(call)
            raise
        return default if answer is None else answer

    @activity.defn(name="prepare_runtime")
    async def prepare_runtime(self, request: PrepareRequest) -> RuntimeHandle:
        return await self._answer("prepare_runtime", request.session_id, request, _handle(request))

    @activity.defn(name="prepare_eval_runtime")
    async def prepare_eval_runtime(self, request: PrepareRequest) -> RuntimeHandle:
        return await self._answer(
            "prepare_eval_runtime", request.session_id, request, _handle(request)
        )

    @activity.defn(name="run_harness")
    async def run_harness(self, request: HarnessRequest) -> HarnessResult:
        done = HarnessResult(
            status="completed",
            exit_code=0,
            duration_s=0.1,
            stdout_key=f"stub/{request.session_id}/stdout",
            stderr_key=f"stub/{request.session_id}/stderr",
            attempt=request.attempt_base + activity.info().attempt,
        )
        return await self._answer("run_harness", request.session_id, request, done)

    @activity.defn(name="build_trajectory")
    async def build_trajectory(self, request: BuildRequest) -> BuildResult:
        built = BuildResult(
            traces_key=f"stub/{request.session_id}/traces.jsonl",
            num_completions=2,
            num_traces=1,
            num_response_tokens=10,
            trace_bytes=100,
        )
        return await self._answer("build_trajectory", request.session_id, request, built)

    @activity.defn(name="evaluate")
    async def evaluate(self, request: EvaluateRequest) -> EvaluateResult:
        graded = EvaluateResult(reward=1.0, detail="stub: passed")
        return await self._answer("evaluate", request.session_id, request, graded)

    @activity.defn(name="score_traces")
    async def score_traces(self, request: ScoreRequest) -> ScoreResult:
        scored = ScoreResult(
            traces_key=request.traces_key,
            num_traces=1,
            num_response_tokens=10,
            trace_bytes=120,
        )
        session_id = request.traces_key.split("/")[1]
        return await self._answer("score_traces", session_id, request, scored)

    @activity.defn(name="teardown")
    async def teardown(self, handle: RuntimeHandle) -> TeardownResult:
        released = TeardownResult(session_id=handle.session_id, host_id="stub", found=True)
        return await self._answer("teardown", handle.session_id, handle, released)

    @activity.defn(name="release_runtime")
    async def release_runtime(self, handle: RuntimeHandle) -> TeardownResult:
        released = TeardownResult(session_id=handle.session_id, host_id="stub", found=True)
        return await self._answer("release_runtime", handle.session_id, handle, released)

    @activity.defn(name="host_alive")
    async def host_alive(self) -> str:
        return "stub"

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.prepare_runtime,
            self.prepare_eval_runtime,
            self.run_harness,
            self.build_trajectory,
            self.evaluate,
            self.score_traces,
            self.teardown,
            self.release_runtime,
            self.host_alive,
        ]


def _handle(request: PrepareRequest) -> RuntimeHandle:
    """A runtime with no host queue: every later stage stays on the shared queues."""
    return RuntimeHandle(
        kind=request.runtime.kind, session_id=request.session_id, workdir="/stub", host="stub"
    )


async def until_cancelled(request: Any, attempt: int) -> None:
    """A stage that runs (heartbeating) until the workflow cancels it."""
    while True:
        activity.heartbeat()
        await asyncio.sleep(0.2)


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox as `polar worker` runs it (activities/worker.py: the project's modules passed
    through); built here so this file imports no activity code."""
    passthrough = ("polar", "workflows", "pydantic", "pydantic_core")
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*passthrough)
    )


@pytest.fixture(scope="module")
async def client(devstack: DevStack) -> Client:
    return await connect(devstack.settings)


@asynccontextmanager
async def serving(
    client: Client,
    stubs: Stubs,
    fresh_runtime: frozenset[str] = frozenset({"command"}),
    hosts: tuple[str, ...] = (),
) -> AsyncIterator[str]:
    """The real workflows and `stubs` on a fresh task queue (every stub on every stage
    queue, so a stage moved to another pool still finds its stub), and on the probe and
    stage queues of each host id in `hosts`; yields the queue. The evaluator kinds in
    `fresh_runtime` grade in a fresh runtime, as `polar worker` declares its evaluators'
    (here: the `command` evaluator's, as activities/evaluators says)."""
    queue = f"branches-{uuid.uuid4().hex[:10]}"
    queues = Queues.for_workflow_queue(queue)
    RolloutTask.declare_evaluators(fresh_runtime)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(
            Worker(
                client,
                task_queue=queue,
                workflows=[RolloutTask, SessionBatch, Session],
                workflow_runner=workflow_runner(),
            )
        )
        host_queues = [HostQueues.for_host(queue, host) for host in hosts]
        for stage_queue in (
            *(queues.init, queues.run, queues.postrun),
            *(q for h in host_queues for q in (h.probe, h.init, h.run, h.postrun)),
        ):
            await stack.enter_async_context(
                Worker(client, task_queue=stage_queue, activities=stubs.all())
            )
        yield queue


def task_spec(name: str, **extra: Any) -> TaskSpec:
    """A task of `command` harness and evaluator (the stubs never run them); timeouts from
    `extra` over 1 s heartbeats (a cancelled stage hears of it within a second)."""
    timeouts = {"heartbeat_s": 1, **extra.pop("timeouts", {})}
    return TaskSpec.model_validate(
        {
            "task_id": f"{name}-{uuid.uuid4().hex[:6]}",
            "harness": {"kind": "command", "command": "true"},
            "evaluator": {"kind": "command", "command": "true"},
            "timeouts": timeouts,
            **extra,
        }
    )


async def run_task(
    client: Client, queue: str, spec: TaskSpec, limit: timedelta | None = None
) -> TaskResult:
    return await client.execute_workflow(
        "RolloutTask",
        spec.model_dump(mode="json"),
        id=spec.task_id,
        task_queue=queue,
        result_type=TaskResult,
        execution_timeout=limit or _LIMIT,
    )


_LIMIT = timedelta(seconds=60)
"""No test here should come near it: a workflow stuck on a bug fails instead of hanging."""


def only_session(result: TaskResult) -> SessionResult:
    assert len(result.sessions) == 1
    return result.sessions[0]


async def test_every_stage_runs_once_in_order_and_the_session_completes(client: Client) -> None:
    stubs = Stubs()
    async with serving(client, stubs) as queue:
        session = only_session(await run_task(client, queue, task_spec("ok")))
    assert session.status == SessionStatus.COMPLETED
    assert (session.reward, session.num_traces, session.error) == (1.0, 1, None)
    mine = [c.activity for c in stubs.calls if c.session_id == session.session_id]
    stages = [a for a in mine if a != "prepare_eval_runtime"]
    assert stages[:4] == ["prepare_runtime", "run_harness", "build_trajectory", "evaluate"]
    # then scoring (S3 only) and the release of the runtimes nothing needs any more, side by side
    assert sorted(stages[4:]) == ["score_traces", "teardown"]
    # the evaluator's fresh runtime was prepared and released with the session's
    assert stubs.sessions_of("prepare_eval_runtime") == {f"{session.session_id}-eval"}
    assert stubs.sessions_of("teardown") == {session.session_id, f"{session.session_id}-eval"}


async def test_an_evaluator_declaring_no_fresh_runtime_gets_none_prepared(
    client: Client,
) -> None:
    """The workflow prewarms by the evaluators' declaration, which the worker hands it: an
    evaluator kind not declared to grade in a fresh runtime gets none prepared, its session
    says so in its input, and `evaluate` is asked to prepare what it needs itself."""
    stubs = Stubs()
    async with serving(client, stubs, fresh_runtime=frozenset()) as queue:
        session = only_session(await run_task(client, queue, task_spec("no-prewarm")))
        started = await client.get_workflow_handle(session.session_id).fetch_history()
    assert session.status == SessionStatus.COMPLETED
    assert stubs.sessions_of("prepare_eval_runtime") == set()
    assert stubs.sessions_of("teardown") == {session.session_id}
    [evaluate] = [c for c in stubs.requests if c[0] == "evaluate"]
    assert evaluate[1].eval_runtime is None
    first = started.events[0].workflow_execution_started_event_attributes
    assert b'"fresh_eval_runtime":false' in first.input.payloads[0].data.replace(b" ", b"")


async def test_a_silent_host_is_given_up_and_the_session_placed_again_elsewhere(
    client: Client,
) -> None:
    """The first placement lands on a host nobody serves: its run is not started within
    the host wait (60 s), the host's probe goes unanswered (10 s), its runtimes get a release
    on its own queue, and the session is prepared again, on a live host, where it completes;
    its second run records under attempts of its own. (About 75 s: the waits are real.)"""
    stubs = Stubs()
    async with serving(client, stubs, hosts=("here",)) as queue:
        placements = iter(["gone", "here"])

        async def on_a_host(request: PrepareRequest, attempt: int) -> RuntimeHandle:
            host = next(placements)
            prefix = host_queue_prefix(queue, host)
            return _handle(request).model_copy(update={"host_id": host, "host_queue": prefix})

        stubs.script["prepare_runtime"] = on_a_host
        spec = task_spec("lost-host")
        session = only_session(await run_task(client, queue, spec, timedelta(seconds=180)))
        history = await client.get_workflow_handle(session.session_id).fetch_history()
    assert session.status == SessionStatus.COMPLETED and session.reward == 1.0
    assert session.hosts == ["gone", "here"]
    assert [w for w in session.warnings if w.startswith("host gone lost (")], session.warnings
    [run] = [request for name, request in stubs.requests if name == "run_harness"]
    assert run.runtime.host_id == "here"
    assert run.attempt_base == spec.timeouts.max_attempts  # the first placement's were its own
    assert stubs.sessions_of("teardown") == {session.session_id, f"{session.session_id}-eval"}
    scheduled = [
        (a.activity_type.name, a.task_queue.name)
        for a in (e.activity_task_scheduled_event_attributes for e in history.events)
        if a.activity_type.name
    ]
    gone = HostQueues.for_host(queue, "gone")
    assert ("host_alive", gone.probe) in scheduled
    assert scheduled.count(("release_runtime", gone.init)) == 2  # the runtime and the eval's


async def test_a_harness_out_of_budget_ends_timeout_and_is_still_built_and_scored(
    client: Client,
) -> None:
    async def out_of_budget(request: HarnessRequest, attempt: int) -> HarnessResult:
        return HarnessResult(
            status="timeout",
            exit_code=None,
            duration_s=request.budget_s,
            stdout_key="stub/stdout",
            stderr_key="stub/stderr",
            attempt=attempt,
        )

    stubs = Stubs(script={"run_harness": out_of_budget})
    async with serving(client, stubs) as queue:
        session = only_session(await run_task(client, queue, task_spec("budget")))
    assert session.status == SessionStatus.TIMEOUT
    assert stubs.attempts("run_harness") == [1]  # an answer, not a failure: not retried
    for stage in ("build_trajectory", "evaluate", "score_traces", "teardown"):
        assert session.session_id in stubs.sessions_of(stage), stage


async def test_a_run_that_errors_is_graded_but_its_reward_withheld(client: Client) -> None:
    """One status, one reward: a run stage that failed (its runtime broke, not the policy)
    ends `error` with no reward, even where the evaluator would have given 1."""

    async def broken(request: HarnessRequest, attempt: int) -> None:
        raise ApplicationError("stub: the engine lost the container", non_retryable=True)

    stubs = Stubs(script={"run_harness": broken})
    async with serving(client, stubs) as queue:
        session = only_session(await run_task(client, queue, task_spec("run-error")))
    assert session.status == SessionStatus.ERROR
    assert session.error is not None and session.error.startswith("run_harness")
    assert session.session_id in stubs.sessions_of("evaluate")  # graded, for the record
    assert session.reward is None, session.reward
    assert session.evaluation is not None
    assert any("reward 1.0 withheld" in w for w in session.warnings), session.warnings


@pytest.mark.parametrize(
    ("relayed", "attempts", "built"),
    [
        (0, 1, False),  # sealed, nothing forwarded, first attempt: nothing can be recorded
        (1, 1, True),  # a request went through the channel: it may have been recorded
        (None, 1, True),  # not sealed: the harness may have called the gateway directly
        (0, 2, True),  # an earlier attempt may have left records
    ],
)
async def test_build_is_skipped_only_when_nothing_can_have_been_recorded(
    client: Client, relayed: int | None, attempts: int, built: bool
) -> None:
    async def run(request: HarnessRequest, attempt: int) -> HarnessResult:
        if attempt < attempts:
            raise ApplicationError("transient")
        return HarnessResult(
            status="completed",
            exit_code=0,
            duration_s=0.1,
            stdout_key="stub/stdout",
            stderr_key="stub/stderr",
            attempt=request.attempt_base + attempt,
            relayed_calls=relayed,
        )

    stubs = Stubs(script={"run_harness": run})
    spec = task_spec("skip-build", evaluator={"kind": "none"})
    async with serving(client, stubs) as queue:
        session = only_session(await run_task(client, queue, spec))
    assert session.status == SessionStatus.COMPLETED
    mine = [c.activity for c in stubs.calls if c.session_id == session.session_id]
    assert ("build_trajectory" in mine) is built, mine
    assert "teardown" in mine
    if not built:
        assert (session.traces_key, session.num_completions, session.num_traces) == (None, 0, 0)
        assert "score_traces" not in mine


async def test_a_stage_past_its_timeout_is_retried_then_the_session_errors_naming_it(
    client: Client,
) -> None:
    async def too_slow(request: PrepareRequest, attempt: int) -> None:
        await asyncio.sleep(5)  # prepare_s is 1

    stubs = Stubs(script={"prepare_runtime": too_slow})
    spec = task_spec(
        "slow-prepare",
        timeouts={"prepare_s": 1, "heartbeat_s": 30, "max_attempts": 2},
        # the stage's own retries only: no second run on fresh ground (test_infra_retry.py)
        infra_errors={"group": "shrink"},
    )
    async with serving(client, stubs) as queue:
        session = only_session(await run_task(client, queue, spec))
    assert session.status == SessionStatus.ERROR
    assert session.error is not None
    assert session.error.startswith("prepare"), session.error
    assert "timeout" in session.error.lower(), session.error
    assert stubs.attempts("prepare_runtime") == [1, 2]  # max_attempts
    assert stubs.sessions_of("run_harness") == set()
    # nothing was prepared, yet the session is closed (a teardown with no workspace)
    assert stubs.sessions_of("teardown") == {session.session_id}


async def test_a_stage_failing_non_retryably_errors_the_session_naming_the_stage(
    client: Client,
) -> None:
    async def unusable(request: BuildRequest, attempt: int) -> None:
        raise ApplicationError(
            "stub: builder cannot read", type="InvalidBuilder", non_retryable=True
        )

    stubs = Stubs(script={"build_trajectory": unusable})
    async with serving(client, stubs) as queue:
        session = only_session(await run_task(client, queue, task_spec("bad-build")))
    assert session.status == SessionStatus.ERROR
    assert session.error is not None
    assert session.error.startswith("build"), session.error
    assert "stub: builder cannot read" in session.error
    assert stubs.attempts("build_trajectory") == [1]  # max_attempts is 3: not retried
    assert stubs.sessions_of("evaluate") == stubs.sessions_of("score_traces") == set()
    # the runtime and the evaluator's runtime are released all the same
    assert stubs.sessions_of("teardown") == {session.session_id, f"{session.session_id}-eval"}


async def test_a_stage_failing_once_transiently_is_retried_and_the_session_completes(
    client: Client,
) -> None:
    async def flaky(request: HarnessRequest, attempt: int) -> None:
        if attempt == 1:
            raise RuntimeError("stub: connection reset")

    stubs = Stubs(script={"run_harness": flaky})
    async with serving(client, stubs) as queue:
        session = only_session(await run_task(client, queue, task_spec("flaky")))
    assert session.status == SessionStatus.COMPLETED
    assert session.error is None
    assert stubs.attempts("run_harness") == [1, 2]
    assert stubs.attempts("prepare_runtime") == [1]  # only the failed stage ran again
    assert session.reward == 1.0


async def test_cancelling_a_task_cancels_its_running_sessions_and_tears_them_down(
    client: Client,
) -> None:
    stubs = Stubs(script={"run_harness": until_cancelled})
    spec = task_spec("cancel", num_sessions=2)
    async with serving(client, stubs) as queue:
        handle = await client.start_workflow(
            "RolloutTask",
            spec.model_dump(mode="json"),
            id=spec.task_id,
            task_queue=queue,
            execution_timeout=_LIMIT,
        )
        await wait_for(
            lambda: len(stubs.sessions_of("run_harness")) == 2, 30, "both harnesses running"
        )
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        assert isinstance(failure.value.cause, CancelledError)
        sessions = stubs.sessions_of("run_harness")
        for session_id in sessions:
            described = await client.get_workflow_handle(session_id).describe()
            assert described.status == WorkflowExecutionStatus.CANCELED, session_id
    assert {c.session_id for c in stubs.cancelled if c.activity == "run_harness"} == sessions
    assert sessions <= stubs.sessions_of("teardown")
    assert stubs.sessions_of("build_trajectory") == set()


async def test_early_stop_cancels_the_stragglers_once_enough_sessions_are_usable(
    client: Client,
) -> None:
    async def first_finishes(request: HarnessRequest, attempt: int) -> None:
        if not request.session_id.endswith("-s0"):
            await until_cancelled(request, attempt)

    stubs = Stubs(script={"run_harness": first_finishes})
    spec = task_spec("early", num_sessions=3, min_usable_sessions=1)
    async with serving(client, stubs) as queue:
        result = await run_task(client, queue, spec)
    assert result.stopped_early
    by_index = sorted(result.sessions, key=lambda s: s.index)
    assert [s.status for s in by_index] == [
        SessionStatus.COMPLETED,
        SessionStatus.CANCELLED,
        SessionStatus.CANCELLED,
    ]
    assert [s.session_id for s in result.usable] == [by_index[0].session_id]
    stragglers = {s.session_id for s in by_index[1:]}
    # the stragglers' harnesses were stopped and their runtimes released before the task ended
    assert {c.session_id for c in stubs.cancelled if c.activity == "run_harness"} == stragglers
    assert stragglers <= stubs.sessions_of("teardown")

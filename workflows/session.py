"""The Session workflow: one harness run, from runtime to scored traces.

`Session.run` is the stage script: prepare → run → build → evaluate → score → teardown.

- prepare: `prepare_runtime` (shared init queue) places the session's runtime on a host;
- run: `run_harness` on that host (its evaluator's fresh runtime prepared beside it);
- build: `build_trajectory` turns the recorded calls into traces (shared postrun queue);
- evaluate: `evaluate` on the host, in the evaluator's fresh runtime;
- score: `score_traces` writes the reward into the traces (shared postrun queue);
- teardown: the runtimes released (host init queue), always, whatever happened.

Each stage's queue, timeout and retry rule come from the stage table (workflows/stages.py)
through `StageCalls` (workflows/stage_calls.py), which types each call by its entry. Where
the runtimes live is the placement's business (workflows/placement.py): the host and its
queues, liveness probes, the evaluator's prewarmed runtime, releasing the runtimes as soon
as nothing needs them (after the run without an evaluator, else after evaluate, beside the
stages that only touch S3) and, when the host is lost, giving it up so the session is
prepared again elsewhere (its run attempts numbered on, so its records stay apart), up to
`max_attempts` placements, else the session ends `error` naming the lost host.
Every result carries its outcome class (polar/outcomes.py, from what the stages report:
the harness's started marker, the gateway's unserved calls, the failing stage's error
type), upserted as `PolarOutcome` and counted by the worker's metric meter. A session
whose stage (prepare, run, build, evaluate or score) ends `infra_error` is run again from
prepare on a fresh runtime under the task's `infra_errors` rule (`renew`: its runtimes
released, the session left open, its next run's records under attempts of its own); an
`infra_error` session's grade is withheld: no reward, never 0.
Activities are referenced by name only; all I/O lives in `activities/`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate
from temporalio.exceptions import (
    ActivityError,
    TimeoutError,
    TimeoutType,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from polar import search_attributes as sa
    from polar.contracts import (
        BuildRequest,
        BuildResult,
        CollectedArtifacts,
        EvaluateRequest,
        EvaluateResult,
        HarnessRequest,
        HarnessResult,
        RuntimeHandle,
        ScoreRequest,
        SessionProgress,
        SessionResult,
        SessionSpec,
        Stage,
    )
    from polar.outcomes import HOST_LOST, TASK_ERRORS
    from polar.records import SessionStatus
    from polar.session_artifacts import (
        TRACE_REWARDS,
        TRACES,
        evaluation_artifacts,
        harness_artifacts,
    )
    from polar.tasks.steps import TaskStep
    from workflows import stages
    from workflows.inputs import parse_input
    from workflows.placement import HostLost, Placement, error_text, error_type
    from workflows.session_steps import InfraFault, in_step, run_steps
    from workflows.stage_calls import StageCalls
    from workflows.web_ui import console_base, session_details

# the long stages, whose PolarStage is worth a visibility update; the others' stage goes out
# with the next of these (and the status and reward with the stage `done`)
UPSERTED_STAGES = frozenset({Stage.PREPARE, Stage.RUN, Stage.EVALUATE})

OUTCOMES_METRIC = "polar_session_outcomes"
"""Sessions ended, by outcome class and infra reason: a counter of the workflow's metric meter,
in the worker's Temporal metrics (activities/observability.py serves them)."""

HARNESS_STATUS = {
    "completed": SessionStatus.COMPLETED,
    "failed": SessionStatus.HARNESS_FAILED,
    "timeout": SessionStatus.TIMEOUT,
}


def _recorded_nothing(harness: HarnessResult | None) -> bool:
    """Whether no model call can have been recorded for the session: its first run attempt
    (no earlier one left records) had the sealed channel as its only door to the gateway,
    and the channel forwarded no request."""
    return harness is not None and harness.attempt == 1 and harness.relayed_calls == 0


@workflow.defn(name="Session")
class Session:
    """One session of a rollout task: a harness in a runtime, recorded and scored."""

    def __init__(self) -> None:
        self._current = Stage.PENDING
        self._status: SessionStatus | None = None
        self._detail = ""
        self._run_issued = 0  # run stages issued so far: each gets attempts of its own
        self._run_base = 0  # the attempt base of the last run issued (earlier ones' records
        # belong to placements given up, never this session's traces)
        self._collected: CollectedArtifacts | None = None  # the last run's, for its grading
        self._started = 0.0
        self._pending_upserts: list[Any] = []  # status and reward, sent with the last stage
        self._console: str | None = None  # the console's base URL, from the memo (web_ui.py)

    @workflow.query(name="progress")
    def progress(self) -> SessionProgress:
        return SessionProgress(
            session_id=workflow.info().workflow_id,
            stage=self._current,
            status=self._status,
            detail=self._detail,
        )

    @workflow.run
    async def run(self, raw: dict[str, Any]) -> SessionResult:
        """`raw` is a SessionSpec; an invalid one (a session id that is not a safe path, say)
        fails the workflow at once, non-retryable (`InvalidSessionSpec`), before any stage."""
        spec = parse_input(SessionSpec, raw, "InvalidSessionSpec")
        self._console = console_base()
        self._calls = StageCalls.for_task(spec.task, workflow.info().task_queue)
        placement = Placement(self._calls, spec)
        hosts: list[str] = []
        warnings: list[str] = []
        infra_attempts: list[str] = []
        while True:
            result = SessionResult(
                session_id=spec.session_id,
                task_id=spec.task.task_id,
                index=spec.index,
                status=SessionStatus.ERROR,
                harness=spec.task.harness.kind,
                hosts=hosts,
                warnings=warnings,
                infra_attempts=infra_attempts,
            )
            try:
                await self._stages(spec, result, placement)
                break
            except InfraFault:
                # the next placement's result carries these on (pydantic copied the lists)
                hosts, warnings = result.hosts, result.warnings
                infra_attempts = result.infra_attempts
                result.warnings.extend(await placement.renew(_host_fault(result)))
                continue
            except HostLost as lost:
                # the next placement's result carries these on (pydantic copied the lists)
                hosts, warnings = result.hosts, result.warnings
                warnings.append(f"host {lost.host_id} lost ({lost.detail})")
                if placement.give_up():
                    workflow.logger.warning(
                        "session %s: %s; preparing it again elsewhere",
                        spec.session_id,
                        warnings[-1],
                    )
                    continue
                result.status = SessionStatus.ERROR
                result.error = f"{lost.stage}: host {lost.host_id} lost ({lost.detail})"
                result.error_type, result.error_stage = HOST_LOST, self._current.value
                break
            except ActivityError as exc:
                if is_cancelled_exception(exc):
                    return await self._cancelled(result, placement)
                result.status = SessionStatus.ERROR
                result.error = f"{self._current.value}: {error_text(exc)}"
                result.error_type, result.error_stage = error_type(exc), self._current.value
                if result.reward is not None:  # one status, one reward: an error has none
                    result.warnings.append(
                        f"reward {result.reward} withheld: {self._current.value} failed after "
                        "the grade"
                    )
                    result.reward = None
                if placement.renewable and self._retry_infra(spec, result):
                    hosts, warnings = result.hosts, result.warnings
                    infra_attempts = result.infra_attempts
                    result.warnings.extend(await placement.renew(_host_fault(result)))
                    continue
                break
            except asyncio.CancelledError:
                return await self._cancelled(result, placement)
        self._finish(result)
        await self._teardown(result, placement)
        self._enter(Stage.DONE, f"{result.status.value}, reward {result.reward}", result)
        return result

    async def _stages(self, spec: SessionSpec, result: SessionResult, placement: Placement) -> None:
        """One placement of the session, stage after stage; `HostLost` if its host stops
        answering. Stages with nothing to do are not called."""
        evaluated = spec.task.evaluator.kind != "none"
        runtime = await self._prepare(spec, result, placement)
        if spec.task.steps:  # one instruction after another, each graded
            await run_steps(self, spec, result, placement, runtime)
            return
        harness = await self._run(spec, result, placement, runtime)
        if harness is None and result.error_type in TASK_ERRORS:
            return  # the task was refused before its harness ran: nothing to build or grade
        if self._retry_infra(spec, result):
            raise InfraFault  # run again on a fresh runtime; nothing of this one is built
        if not evaluated:
            placement.release_early()
            if _recorded_nothing(harness):
                return  # no record can exist: nothing to build or score
        # whatever the harness did, its recorded calls become traces and get scored
        build = await self._build(spec, result)
        evaluation = None
        if evaluated:
            evaluation = await self._evaluate(spec, result, placement, runtime, build)
            placement.release_early()
        if build.num_traces:  # else nothing to score
            await self._score(result, build, evaluation)

    async def _prepare(
        self, spec: SessionSpec, result: SessionResult, placement: Placement
    ) -> RuntimeHandle:
        """prepare: a new placement's runtime; the evaluator's starts preparing beside it."""
        self._started = workflow.time()
        self._enter(Stage.PREPARE, f"preparing {spec.task.runtime.kind} runtime")
        runtime = await placement.prepare()
        if placement.host is not None:
            result.hosts.append(placement.host_id)
        self._lap(result, Stage.PREPARE)
        self._stop_if_cancelled()
        placement.start_prewarm()
        return runtime

    async def _run(
        self,
        spec: SessionSpec,
        result: SessionResult,
        placement: Placement,
        runtime: RuntimeHandle,
        step: TaskStep | None = None,
    ) -> HarnessResult | None:
        """run: the harness on the runtime's host (told `step`'s instruction, after its
        actions, where the task has steps); its status is the session's. A run stage that
        failed (None) still has its recorded calls built and graded."""
        task, t = spec.task, spec.task.timeouts
        doing = f"running {task.harness.kind} harness on {runtime.host}"
        self._enter(Stage.RUN, f"{doing}, step {step.name}" if step else doing)

        collect = task.collect_for(step)  # older histories: never asked for one
        if collect is not None and not workflow.patched("collect-artifacts"):
            collect = None

        def request(issue: int) -> HarnessRequest:
            base = self._run_issued * t.max_attempts
            self._run_issued += 1
            self._run_base = base
            return HarnessRequest(
                session_id=spec.session_id,
                task_id=task.task_id,
                runtime=runtime.for_step(step),
                harness=task.harness,
                instruction=step.instruction if step else task.instruction,
                budget_s=(step and step.harness_s) or t.harness_s,
                spec_ref=spec.spec_ref,  # the instruction is in S3 when it is set
                attempt_base=base,
                step=step.name if step else None,
                before=step.prepare if step else [],
                collect=collect,
            )

        harness: HarnessResult | None = None
        self._collected = None
        try:
            harness = await placement.on_host(stages.RUN_HARNESS, request)
            result.status = HARNESS_STATUS[harness.status]
            result.harness_exit_code = harness.exit_code
            result.harness_started = harness.harness_started
            result.unserved_calls = harness.unserved_calls
            result.unserved_by_gateway = harness.unserved_by_gateway
            result.artifacts.update(in_step(step, harness_artifacts(harness)))
            self._collected = harness.collected  # what the next grading puts back
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            timed_out = (
                isinstance(exc.cause, TimeoutError) and exc.cause.type == TimeoutType.START_TO_CLOSE
            )
            result.status = SessionStatus.TIMEOUT if timed_out else SessionStatus.ERROR
            result.error = f"run_harness: {error_text(exc)}"
            result.error_type, result.error_stage = error_type(exc), Stage.RUN.value
        self._lap(result, Stage.RUN)
        self._stop_if_cancelled()
        return harness

    async def _build(
        self,
        spec: SessionSpec,
        result: SessionResult,
        after_attempt: int | None = None,
        joined_attempts: list[int] | None = None,
    ) -> BuildResult:
        """build: the session's recorded calls as traces (shared queue: S3 only); the records
        of attempts up to `after_attempt` (default: before the last run issued) left out,
        `joined_attempts` (a multi-step session's steps) built as one run."""
        task = spec.task
        self._enter(Stage.BUILD, f"building traces with {task.builder.name}")
        request = BuildRequest(
            session_id=spec.session_id,
            task_id=task.task_id,
            harness=task.harness.kind,
            builder=task.builder,
            policy_version=task.policy_version,
            after_attempt=self._run_base if after_attempt is None else after_attempt,
            joined_attempts=joined_attempts or [],
        )
        build = await self._calls.execute(stages.BUILD_TRAJECTORY, request)
        result.traces_key = build.traces_key
        result.num_completions = build.num_completions
        result.num_traces = build.num_traces
        result.num_response_tokens = build.num_response_tokens
        result.trace_bytes = build.trace_bytes
        result.trace_breaks = build.breaks
        result.unseen_completions = build.unseen_completions
        result.artifacts[TRACES] = build.traces_key
        self._lap(result, Stage.BUILD)
        self._stop_if_cancelled()
        return build

    async def _evaluate(
        self,
        spec: SessionSpec,
        result: SessionResult,
        placement: Placement,
        runtime: RuntimeHandle,
        build: BuildResult | None,
        step: TaskStep | None = None,
    ) -> EvaluateResult | None:
        """evaluate: the evaluator on the runtime's host, in its prewarmed runtime if it has
        one (`step`: that step's evaluator, the prewarmed runtime for the first step only).
        One status, one reward: a session whose run ended in error is graded for the
        record, its reward withheld (None)."""
        task = spec.task
        evaluator = (step and step.evaluator) or task.evaluator
        doing = f"evaluating with {evaluator.kind}"
        self._enter(Stage.EVALUATE, f"{doing}, step {step.name}" if step else doing)
        first = step is None or step.name == task.steps[0].name
        eval_runtime = await placement.prewarmed() if first else None
        judged = task.evaluator.rubric is not None and spec.spec_ref is None
        rubric_instruction = task.instruction if judged else None

        def request(issue: int) -> EvaluateRequest:
            return EvaluateRequest(
                session_id=spec.session_id,
                task_id=task.task_id,
                runtime=runtime,
                evaluator=evaluator,
                budget_s=(step and step.evaluate_s) or task.timeouts.evaluate_s,
                traces_key=build.traces_key if build else None,
                source=task.source,
                runtime_spec=task.runtime,
                # issued again: it may have started, so it prepares a fresh one
                eval_runtime=eval_runtime if issue == 0 else None,
                spec_ref=spec.spec_ref,  # the test patch is in S3 when it is set
                # a rubric judge reads the task (from the stored spec when it is slim)
                instruction=rubric_instruction,
                step=step.name if step else None,
                collected=self._collected,
            )

        evaluation = await placement.on_host(stages.EVALUATE, request)
        result.evaluation = evaluation.detail
        result.artifacts.update(in_step(step, evaluation_artifacts(evaluation)))
        outcome = result.outcome
        infra = outcome is not None and outcome.is_infra
        withheld = result.status == SessionStatus.ERROR or infra
        if withheld:
            why = outcome.label if outcome is not None else "error"
            result.warnings.append(
                f"reward {evaluation.reward} withheld: the run ended {why}, "
                "so the grade is no verdict on the policy"
            )
        else:
            result.reward = evaluation.reward
        self._lap(result, Stage.EVALUATE)
        self._stop_if_cancelled()
        return None if withheld else evaluation

    async def _score(
        self, result: SessionResult, build: BuildResult, evaluation: EvaluateResult | None
    ) -> None:
        """score: the session's reward (and the evaluator's per-trace rewards) into its
        traces (shared queue: S3 only)."""
        self._enter(Stage.SCORE, f"scoring {build.num_traces} traces")
        request = ScoreRequest(
            traces_key=build.traces_key,
            reward=result.reward,
            status=result.status,
            trace_rewards=evaluation.trace_rewards if evaluation else {},
        )
        scored = await self._calls.execute(stages.SCORE_TRACES, request)
        result.trace_bytes = scored.trace_bytes
        if scored.rewards_key:
            result.artifacts[TRACE_REWARDS] = scored.rewards_key
        self._lap(result, Stage.SCORE)

    async def _teardown(self, result: SessionResult, placement: Placement) -> None:
        """teardown: the runtimes released and the session closed, on success, failure and
        cancellation alike; what could not be done is in the result's warnings."""
        self._enter(Stage.TEARDOWN, "releasing the runtime")
        result.warnings.extend(await placement.release())
        self._lap(result, Stage.TEARDOWN)

    async def _cancelled(self, result: SessionResult, placement: Placement) -> SessionResult:
        """Mark the session cancelled, tear its runtime down, end the workflow as cancelled."""
        result.status = SessionStatus.CANCELLED
        self._finish(result)
        if self._pending_upserts:  # the workflow ends without a stage `done`: send them now
            workflow.upsert_search_attributes(
                [sa.STAGE.value_set(Stage.TEARDOWN.value), *self._pending_upserts]
            )
            self._pending_upserts = []
        await self._teardown(result, placement)
        raise asyncio.CancelledError("session cancelled")

    def _enter(self, stage: Stage, detail: str, ended: SessionResult | None = None) -> None:
        """Enter `stage`: the progress query's and the Web UI's current details (`ended`:
        the result, whose status, reward and outcome the last stage shows)."""
        self._current = stage
        self._detail = detail
        if stage in UPSERTED_STAGES or stage == Stage.DONE:
            workflow.upsert_search_attributes(
                [sa.STAGE.value_set(stage.value), *self._pending_upserts]
            )
            self._pending_upserts = []
        shown: dict[str, Any] = {}
        if ended is not None:
            outcome = ended.outcome
            shown = {
                "status": ended.status.value,
                "reward": ended.reward,
                "outcome": outcome.label if outcome is not None else None,
            }
        workflow.set_current_details(
            session_details(
                stage.value, detail, self._console, workflow.info().workflow_id, ended=shown
            )
        )

    def _finish(self, result: SessionResult) -> None:
        self._status = result.status
        updates: list[SearchAttributeUpdate[Any]] = [sa.STATUS.value_set(result.status.value)]
        if result.reward is not None:
            updates.append(sa.REWARD.value_set(result.reward))
        outcome = result.outcome
        if outcome is not None:
            updates.append(sa.OUTCOME.value_set(sa.outcome_values(outcome)))
            workflow.metric_meter().create_counter(
                OUTCOMES_METRIC, "Sessions ended, by outcome class and infra reason"
            ).add(1, {"outcome": outcome.outcome.value, "reason": outcome.reason or ""})
        self._pending_upserts = updates  # sent with the stage `done`

    @staticmethod
    def _retry_infra(spec: SessionSpec, result: SessionResult) -> bool:
        """Whether the placement that just ended `infra_error` is run again on fresh ground:
        the task's `infra_errors.group` is `wait` and fewer than `retries` runs were given up
        for it so far. If so, it is noted in `result.infra_attempts`."""
        outcome = result.outcome
        rule = spec.task.infra_errors
        if outcome is None or not outcome.is_infra or rule.group != "wait":
            return False
        if len(result.infra_attempts) >= rule.retries:
            return False
        result.infra_attempts.append(f"{outcome.label}: {outcome.detail}")
        workflow.logger.warning(
            "session %s: %s; running it again on a fresh runtime",
            spec.session_id,
            result.infra_attempts[-1],
        )
        return True

    def _lap(self, result: SessionResult, stage: Stage) -> None:
        now = workflow.time()
        result.stage_seconds[stage.value] = round(now - self._started, 3)
        self._started = now

    @staticmethod
    def _stop_if_cancelled() -> None:
        """Raise CancelledError if the session was cancelled while the stage that just ended
        finished anyway: with WAIT_CANCELLATION_COMPLETED, an activity that completes before
        it sees the cancel hands the workflow its result and the cancel is spent."""
        if workflow.cancellation_reason() is not None:
            raise asyncio.CancelledError("session cancelled between stages")


def _host_fault(result: SessionResult) -> bool:
    """Whether the placement just given up failed by its host's own fault."""
    outcome = result.outcome
    return outcome is not None and outcome.host_fault

"""The postrun pool's activities: build a session's traces, grade it, score its traces."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from temporalio import activity

from activities.artifact_placement import artifacts_putter
from activities.evaluators import (
    Evaluation,
    EvaluationJob,
    Evaluator,
    EvaluatorError,
    InvalidKindConfig,
    UnknownEvaluator,
    check_evaluator,
    get_evaluator,
)
from activities.evaluators.control import ControlGrade, control_grading
from activities.evaluators.fresh import evaluate_prepare_request, fresh_runtime
from activities.evaluators.reward_checks import InvalidReward, check_rewards
from activities.evaluators.rubric import judge_evaluation
from activities.heartbeat import Heartbeater, heartbeating
from activities.pool_activities import PoolActivities
from activities.runtimes import InvalidRuntime, InvalidSource, PrepareFailed, Runtime
from polar.builders import BuildContext, UnknownBuilder, check_builder, reward_policy
from polar.builders.base import count_unseen, joined_runs, unseen_records
from polar.builders.progress import listening
from polar.builders.reward_policies import assign_rewards
from polar.contracts import (
    BuildRequest,
    BuildResult,
    EvaluateRequest,
    EvaluateResult,
    RuntimeHandle,
    ScoreRequest,
    ScoreResult,
    invalid_input,
)
from polar.evaluation_reports import ControlReport
from polar.storage import TraceRewards, artifact_key, read_traces, rewards_key, traces_key

CONTROL_MARGIN_S = 20.0
"""Of the evaluate stage's time, what a control grading leaves for uploading the report."""


def _checked_evaluator(request: EvaluateRequest) -> Evaluator:
    """The evaluator of the request's kind, its config checked by the kind's model; an
    unknown kind or an invalid config is a non-retryable error."""
    try:
        check_evaluator(request.evaluator)
        return get_evaluator(request.evaluator.kind)
    except UnknownEvaluator as exc:
        raise invalid_input(str(exc), "UnknownEvaluator") from None
    except InvalidKindConfig as exc:
        raise invalid_input(str(exc), "InvalidTaskSpec") from None


class PostrunActivities(PoolActivities):
    """The postrun pool (`{queue}-postrun`, and this host's `-postrun` queue: `evaluate`
    reads the session's runtime)."""

    @activity.defn(name="build_trajectory")
    async def build_trajectory(self, request: BuildRequest) -> BuildResult:
        """Build the session's traces from its recorded calls and write them, once."""
        try:  # first: a builder that does not resolve fails at once, not retried
            builder = check_builder(request.builder)
            policy = reward_policy(request.builder.config)
        except (UnknownBuilder, ValueError) as exc:
            raise invalid_input(str(exc), "InvalidBuilder") from exc
        # the serial S3 listing and reads, then the build, run in threads, heartbeating
        # their progress (a long session must not look like a dead worker)
        async with Heartbeater(step="loading completions") as hb:

            def read(done: int, total: int) -> None:
                hb.update(records_read=done, records=total)

            def built(done: int, total: int) -> None:
                hb.update(calls_built=done, calls=total)

            records = await asyncio.to_thread(
                self.storage.list_completions, request.session_id, read
            )
            # a sample the harness never saw (caller hung up, or resent because its answer
            # never arrived) is no training data, whatever the builder
            unseen = unseen_records(records)
            unseen |= {  # a placement given up for an infra error: its run earned nothing
                r.record_id: "earlier_placement"
                for r in records
                if r.attempt <= request.after_attempt and r.record_id not in unseen
            }
            seen = [r for r in records if r.record_id not in unseen]
            seen = joined_runs(seen, request.joined_attempts)  # a multi-step session's steps
            hb.update(step="building", completions=len(seen), unseen=len(unseen))
            ctx = BuildContext(
                session_id=request.session_id,
                task_id=request.task_id,
                harness=request.harness,
                builder=request.builder.name,
                config=request.builder.config,
            )
            with listening(built):  # asyncio.to_thread carries the listener into the thread
                output = await asyncio.to_thread(builder, seen, ctx)
        for trace in output.traces:  # score_traces applies it; custom builders need not
            trace.provenance.reward_policy = policy
            trace.provenance.policy_version = request.policy_version
        key = traces_key(request.session_id, request.builder.name)
        size = await asyncio.to_thread(self.storage.put_traces, key, output.traces)
        return BuildResult(
            traces_key=key,
            num_completions=len(records),
            num_traces=len(output.traces),
            num_response_tokens=sum(int(sum(t.loss_mask)) for t in output.traces),
            trace_bytes=size,
            unusable_completions=len(output.unusable),
            breaks=dict(output.breaks),
            unseen_completions=count_unseen(unseen),
        )

    @activity.defn(name="evaluate")
    async def evaluate(self, request: EvaluateRequest) -> EvaluateResult:
        """Grade the session with its evaluator (activities/evaluators, by kind): where its
        harness never was, a fresh runtime of the task's source plus the session's changes
        (prewarmed while the harness ran, or prepared here), torn down after. Rewards are
        checked (finite) and clamped to the task's range; the report, patch and logs go to
        S3 as artifacts. An evaluator error (the task cannot be graded) or an invalid reward
        fails the session instead of giving it a reward. A `rubric` adds a judge's score to
        the outcome reward first (activities/evaluators/rubric.py)."""
        request = await self.specs.with_evaluator(request)
        kind = request.evaluator.kind
        evaluator = _checked_evaluator(request)  # first: a bad kind or config, not retried
        self._check_host(request.runtime, "evaluate")
        runtime = self._runtime(request.runtime.kind)
        traces = None
        if (evaluator.needs_traces or request.evaluator.rubric) and request.traces_key:
            traces = await asyncio.to_thread(self.storage.get_bytes, request.traces_key)
        # the runtime prepared while the harness ran; a retry cannot trust it (it may hold
        # the patch of the failed attempt) and prepares a fresh one under the same id
        prewarmed = request.eval_runtime if activity.info().attempt == 1 else None
        started = time.monotonic()
        try:
            async with Heartbeater(step="evaluating", evaluator=kind) as hb:
                if evaluator.needs_fresh_runtime:
                    hb.update(step="preparing the evaluator runtime", prewarmed=bool(prewarmed))
                    evaluation, logs = await self._evaluate_in_fresh_runtime(
                        evaluator, request, runtime, prewarmed, traces, started
                    )
                else:
                    job = EvaluationJob(
                        runtime,
                        request.runtime,
                        None,
                        None,
                        request.evaluator,
                        timeout_s=request.budget_s,
                        traces=traces,
                        settings=self.settings,
                    )
                    evaluation, logs = await self._graded(evaluator, job)
        except PrepareFailed as exc:  # the task's prepare actions or the instance's install
            raise invalid_input(
                f"preparing the evaluator's runtime failed: {exc}", "EvaluatorError"
            ) from None  # the session's error says this, not only the prepare action's
        except (InvalidSource, InvalidRuntime) as exc:
            raise invalid_input(str(exc), type(exc).__name__) from exc
        if evaluator.needs_fresh_runtime:
            evaluation.report.eval_runtime = "prewarmed" if prewarmed else "fresh"
        if request.evaluator.rubric is not None and not evaluation.report.evaluator_error:
            judged = judge_evaluation(  # the judge's score joins the outcome's (or says why not)
                self.settings, request, evaluation, traces, time.monotonic() - started
            )
            await heartbeating(judged, step="rubric judge", evaluator=kind)
        failure = None
        if evaluation.report.evaluator_error:
            failure = ("EvaluatorError", evaluation.detail)
        else:
            try:
                check_rewards(evaluation, request.evaluator.reward_range)
            except InvalidReward as exc:
                evaluation.report.invalid_reward = str(exc)
                failure = ("InvalidReward", str(exc))
        if failure is not None and evaluator.needs_fresh_runtime:
            failure = await self._failure_of_the_task(
                failure, evaluator, request, evaluation, started
            )
        log_keys, report_key, patch_key = await self._keep(request, kind, evaluation, logs)
        if failure is not None:
            error_type, message = failure
            raise invalid_input(f"{message} (report: {report_key})", error_type)
        return EvaluateResult(
            reward=evaluation.reward,
            detail=evaluation.detail,
            log_key=log_keys[0] if log_keys else None,
            trace_rewards=evaluation.trace_rewards,
            report_key=report_key,
            log_keys=log_keys,
            patch_key=patch_key,
            components=evaluation.components,
        )

    async def _evaluate_in_fresh_runtime(
        self,
        evaluator: Evaluator,
        request: EvaluateRequest,
        runtime: Runtime,
        prewarmed: RuntimeHandle | None,
        traces: bytes | None,
        started: float,
    ) -> tuple[Evaluation, dict[str, bytes]]:
        """Grade in the evaluator's fresh runtime (the prewarmed one, or prepared now); its
        logs are read before it is torn down."""
        prepare = evaluate_prepare_request(request)
        eval_runtime = self._runtime(prepare.runtime.kind)
        async with fresh_runtime(eval_runtime, prepare, prewarmed) as eval_handle:
            job = EvaluationJob(
                runtime,
                request.runtime,
                eval_runtime,
                eval_handle,
                request.evaluator,
                # the budget covers preparing the fresh runtime too
                timeout_s=max(1.0, request.budget_s - (time.monotonic() - started)),
                traces=traces,
                settings=self.settings,
                prepare=prepare,
                put_artifacts=artifacts_putter(
                    self.storage, request.collected, eval_runtime, eval_handle
                ),
            )
            return await self._graded(evaluator, job)

    async def _failure_of_the_task(
        self,
        failure: tuple[str, str],
        evaluator: Evaluator,
        request: EvaluateRequest,
        evaluation: Evaluation,
        started: float,
    ) -> tuple[str, str] | None:
        """`failure` (a task_error) where the control grading of the untouched task fails
        too; None where it grades, or does not finish in the stage's time: the failure is
        not shown to lie outside the session, so `evaluation` becomes the policy's zero
        (activities/evaluators/control.py)."""
        error_type, message = failure
        kind = evaluate_prepare_request(request).runtime.kind
        timeout = activity.info().start_to_close_timeout
        left = (timeout.total_seconds() if timeout else request.budget_s) - CONTROL_MARGIN_S
        left -= time.monotonic() - started
        try:
            control = await asyncio.wait_for(
                control_grading(
                    evaluator,
                    request,
                    self._runtime(kind),
                    self.storage,
                    self.settings,
                    timeout_s=max(1.0, min(request.budget_s, left)),
                ),
                timeout=max(1.0, left),
            )
        except TimeoutError:
            control = ControlGrade(True, "not done in the stage's time: not shown to be the task's")
        evaluation.report.control = ControlReport(
            graded=control.graded, detail=control.detail, failure=message[:1000]
        )
        if not control.graded:
            why = f"the untouched task fails to grade too: {control.detail[:300]}"
            return error_type, f"{message}; {why}"
        evaluation.report.evaluator_error = None
        evaluation.report.invalid_reward = None
        evaluation.reward, evaluation.trace_rewards = 0.0, {}
        evaluation.detail = (
            f"grading the session's work failed ({message[:300]}) while the untouched task "
            f"grades ({control.detail[:200]}): the session's failure, reward 0"
        )
        return None

    @staticmethod
    async def _graded(
        evaluator: Evaluator, job: EvaluationJob
    ) -> tuple[Evaluation, dict[str, bytes]]:
        """`evaluator`'s outcome (an EvaluatorError made one, with a zero reward) and logs."""
        try:
            evaluation = await heartbeating(evaluator.evaluate(job), step="evaluating")
        except EvaluatorError as exc:
            evaluation = Evaluation(
                0.0,
                f"evaluator error: {str(exc)[:500]}",
                report=evaluator.report_model(evaluator_error=str(exc)),
            )
        return evaluation, await asyncio.to_thread(evaluator.logs, job, evaluation)

    async def _keep(
        self, request: EvaluateRequest, kind: str, evaluation: Evaluation, logs: dict[str, bytes]
    ) -> tuple[list[str], str, str]:
        """The evaluation's logs, report and patch in S3 (a step's under `steps/{name}/`):
        the logs' keys, the report's and the patch's."""
        folder = f"steps/{request.step}/" if request.step else ""
        log_keys = await self._upload_eval_logs(request.session_id, logs, folder)
        report_key, patch_key = await self._upload_evaluation(
            request.session_id, kind, evaluation, folder
        )
        return log_keys, report_key, patch_key

    async def _upload_eval_logs(
        self, session_id: str, logs: dict[str, bytes], folder: str = ""
    ) -> list[str]:
        """The evaluator's logs, kept under the session's artifacts (in `folder`); their keys."""
        keys = []
        for name, data in logs.items():
            key = artifact_key(session_id, folder + name)
            await asyncio.to_thread(self.storage.put_bytes, key, data, "text/plain")
            keys.append(key)
        return keys

    async def _upload_evaluation(
        self, session_id: str, kind: str, evaluation: Evaluation, folder: str = ""
    ) -> tuple[str, str]:
        """The evaluation's report and the patch it graded in S3 (in `folder`); their keys."""
        uploads = {
            f"{folder}{kind}-report.json": (evaluation.report.to_json(), "application/json"),
            f"{folder}{kind}-model.patch": (evaluation.patch, "text/x-diff"),
        }
        keys = [artifact_key(session_id, name) for name in uploads]
        for key, (data, content_type) in zip(keys, uploads.values(), strict=True):
            await asyncio.to_thread(self.storage.put_bytes, key, data, content_type)
        report_key, patch_key = keys
        return report_key, patch_key

    @activity.defn(name="score_traces")
    async def score_traces(self, request: ScoreRequest) -> ScoreResult:
        """Give the session's reward and terminal status to every one of its traces, in the
        rewards sidecar beside them (the traces stay as build wrote them; `load_traces`
        joins the two).

        Policy (polar/builders/reward_policies.py): the outcome reward is broadcast to
        each trace, or divided across them (`reward: session_normalized` in
        the builder config); a session whose harness failed or timed out keeps
        the reward its evaluator gave (the evaluator still ran on what the
        harness left) and its masks, and its status is on each trace so a
        trainer can drop or mask it; no evaluation means reward None.
        """
        data = await asyncio.to_thread(self.storage.get_bytes, request.traces_key)
        traces = list(read_traces(data))  # as built: a retry does not read its own sidecar
        assign_rewards(traces, request.reward, request.status, request.trace_rewards)
        sidecar = TraceRewards.of(traces, request.status)
        size = await asyncio.to_thread(self.storage.put_rewards, request.traces_key, sidecar)
        return ScoreResult(
            traces_key=request.traces_key,
            rewards_key=rewards_key(request.traces_key),
            num_traces=len(traces),
            num_response_tokens=sum(int(sum(t.loss_mask)) for t in traces),
            trace_bytes=len(data) + size,
        )

    def all(self) -> list[Callable[..., Any]]:
        return [self.build_trajectory, self.evaluate, self.score_traces]

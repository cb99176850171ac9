"""Control grading: whether a session's failed grading is the session's fault or the task's.

`task_error` keeps a session out of its group's baseline, so it is given only when the
fault is shown to lie outside the session's reach (docs/operations.md, outcome classes).
When grading a session fails (an `EvaluatorError`: no graded test matched, the runner's
results are missing, a verifier wrote no reward; a reward file or reward that is not valid),
the untouched task is graded once, the same way, as a control: a fresh runtime of the task's
source (id `{session}-control`) stands for the session's too, so its changes are none, and
the evaluator grades it fully (`EvaluationJob.control`: even an empty patch runs the tests),
with no traces. If the control grades (whatever its reward), the task can be graded and the
failure came from the session's work: it is the policy's, reward 0. If the control fails
too, the task cannot be graded: `task_error`. The control's verdict depends on the task
alone, so it is kept in S3 (`tasks/{task_id}/control/{digest}.json`, the digest of the
evaluator, source and runtime specs) and later sessions of the task reuse it. A control that
fails on the worker's side (the engine, S3) raises, and the stage is retried.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass

from activities.evaluators.base import EvaluationJob, Evaluator, EvaluatorError
from activities.evaluators.fresh import evaluate_prepare_request, fresh_runtime
from activities.evaluators.reward_checks import InvalidReward, check_rewards
from activities.heartbeat import heartbeating
from activities.runtimes.base import Runtime
from polar.contracts import EvaluateRequest
from polar.ids import checked_id
from polar.settings import WorkerSettings
from polar.storage import Storage

CONTROL_SUFFIX = "-control"
"""The id suffix of a control grading's runtime (`{session}-control`)."""


@dataclass(frozen=True)
class ControlGrade:
    """The control grading's verdict: whether the untouched task grades, and what it said."""

    graded: bool
    detail: str

    def to_json(self) -> bytes:
        return json.dumps({"graded": self.graded, "detail": self.detail}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ControlGrade:
        value = json.loads(data)
        return cls(bool(value["graded"]), str(value["detail"]))


def control_key(request: EvaluateRequest) -> str:
    """Where the control of `request`'s task is kept: per task id and per what grades it."""
    parts = [
        request.evaluator.model_dump_json(),
        request.source.model_dump_json() if request.source else "",
        request.runtime_spec.model_dump_json() if request.runtime_spec else request.runtime.kind,
    ]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]
    return f"tasks/{checked_id(request.task_id, 'task id')}/control/{digest}.json"


async def control_grading(
    evaluator: Evaluator,
    request: EvaluateRequest,
    runtime: Runtime,
    storage: Storage,
    settings: WorkerSettings,
    timeout_s: float,
) -> ControlGrade:
    """The control grading of `request`'s untouched task (kept in S3 once made)."""
    key = control_key(request)
    try:
        return ControlGrade.from_json(await asyncio.to_thread(storage.get_bytes, key))
    except KeyError:
        pass
    grade = await heartbeating(
        _grade_untouched(evaluator, request, runtime, settings, timeout_s),
        step="control grading of the untouched task",
    )
    await asyncio.to_thread(storage.put_bytes, key, grade.to_json(), "application/json")
    return grade


async def _grade_untouched(
    evaluator: Evaluator,
    request: EvaluateRequest,
    runtime: Runtime,
    settings: WorkerSettings,
    timeout_s: float,
) -> ControlGrade:
    prepare = evaluate_prepare_request(request).model_copy(
        update={"session_id": request.session_id + CONTROL_SUFFIX}
    )
    async with fresh_runtime(runtime, prepare) as handle:
        job = EvaluationJob(
            runtime,
            handle,
            runtime,
            handle,
            request.evaluator,
            timeout_s=timeout_s,
            traces=b"",
            settings=settings,
            prepare=prepare,
            control=True,
        )
        try:
            evaluation = await evaluator.evaluate(job)
        except EvaluatorError as exc:  # InvalidRewardFile among them
            return ControlGrade(False, str(exc)[:1000])
    if evaluation.report.evaluator_error:
        return ControlGrade(False, evaluation.report.evaluator_error[:1000])
    try:
        check_rewards(evaluation, request.evaluator.reward_range)
    except InvalidReward as exc:
        return ControlGrade(False, str(exc)[:1000])
    return ControlGrade(True, f"reward {evaluation.reward:g}: {evaluation.detail[:500]}")

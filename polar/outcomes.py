"""Outcome classes: what a session's end says about the policy, and why when it says nothing.

A trainer reads a reward as a verdict on the policy, so a session whose
infrastructure failed must never look like a policy that failed. `classify`
turns what the Session workflow saw (status, reward, the harness's started
marker, the gateway's unserved calls, the failing stage's error type) into one
`SessionOutcome`:

* `ok`: the harness ran and completed (graded above 0 when an evaluator ran);
* `policy_failure`: the harness ran and failed, or its work was graded 0 or less;
* `timeout`: the harness ran past its budget;
* `infra_error` with an `InfraReason`: the stack failed the session (the sandbox
  never reached the harness, the image lacks what the sandbox needs (`RuntimeUnfit`), the
  engine or S3 failed a stage, the inference backend left calls unserved before the harness
  failed, the evaluator failed on the worker's side, the host was lost). Such a
  session gets no reward, is retried on fresh ground and is never trained on;
* `task_error`: the task itself cannot run or be graded (an invalid spec, an unknown
  evaluator, an image the worker does not hold (`ImageMissing`: build or load it there), a
  compose service of the task's that dies or never gets healthy (`SidecarNotReady`), a
  prepare action of the task's that fails, an `EvaluatorError`: its test patch does not
  apply, its test ids match no test, its verifier writes no reward): no verdict and no
  retry. The evaluator failing on the worker's side (an engine or S3
  error, a full disk: any other error of the evaluate stage) is `infra_error`
  (`evaluator_host`), retried.

A cancelled session has no outcome (None). Pure functions: the workflow sandbox
imports this module.
"""

from __future__ import annotations

from pydantic import BaseModel

from polar.records import CompletionRecord, InfraReason, OutcomeClass, SessionStatus

UNSERVED_STATUS = 500
"""A model call answered with this status or above was not served: an upstream error or
timeout, no replica reachable, a completion the gateway could not record, the gateway itself
unreachable (the channel's 502)."""

GATEWAY_FAULT_HEADER = "x-polar-gateway-fault"
"""Set (to the error's code) on a 5xx the gateway answers for its own failure, not the
inference backend's: the session's channel relay counts those apart (reason `gateway`)."""
GATEWAY_FAULT_CODES = frozenset({"recording_failed", "internal_error"})
"""The gateway's own failures: a completion it could not record (S3), a bug."""

HOST_LOST = "HostLost"
"""The error type the Session workflow gives a session whose host stopped answering."""

TASK_ERRORS: tuple[str, ...] = (
    "InvalidSessionSpec",
    "InvalidTaskSpec",
    "InvalidSource",
    "InvalidRuntime",
    "ImageMissing",
    "SidecarNotReady",
    "InvalidHarness",
    "InvalidBuilder",
    "UnknownEvaluator",
    "InvalidRewardFile",
    "InvalidReward",
    "PrepareFailed",
    "EvaluatorError",
)
"""Error types that mean the task cannot work, whatever runs it (never retried: the first
of polar.contracts.NON_RETRYABLE_ERRORS)."""

INFRA_ERRORS: dict[str, InfraReason] = {
    HOST_LOST: InfraReason.LOST_HOST,
    "WrongHost": InfraReason.LOST_HOST,
    # no worker declaring the GPUs a session asks for polls any more (polar/gpus.py)
    "NoGpuWorker": InfraReason.LOST_HOST,
    "RuntimeNotFound": InfraReason.ENGINE,
    "RuntimeUnfit": InfraReason.IMAGE,
    "ImageNotFound": InfraReason.IMAGE,
    "SandboxStartFailed": InfraReason.SANDBOX_START,
    "BaselineFailed": InfraReason.ENGINE,
    # the Docker SDK's and the tar stream's
    "APIError": InfraReason.ENGINE,
    "DockerException": InfraReason.ENGINE,
    "NotFound": InfraReason.ENGINE,
    "ReadError": InfraReason.ENGINE,
    # boto3's and S3's
    "ClientError": InfraReason.STORAGE,
    "BotoCoreError": InfraReason.STORAGE,
    "EndpointConnectionError": InfraReason.STORAGE,
    "ConnectionClosedError": InfraReason.STORAGE,
    "ReadTimeoutError": InfraReason.STORAGE,
    "ConnectTimeoutError": InfraReason.STORAGE,
    "S3UploadFailedError": InfraReason.STORAGE,
    "NoSuchKey": InfraReason.STORAGE,
    # obstore's (Storage's reads, writes and listings): S3 down is a GenericError
    "GenericError": InfraReason.STORAGE,
    "NotFoundError": InfraReason.STORAGE,
    "PermissionDeniedError": InfraReason.STORAGE,
    "UnauthenticatedError": InfraReason.STORAGE,
}
"""Error types (an ApplicationError's type: the exception's class name) that name the part
of the stack that failed."""

STAGE_REASONS: dict[str, InfraReason] = {
    "prepare": InfraReason.SANDBOX_START,
    "run": InfraReason.ENGINE,
    "build": InfraReason.STORAGE,
    "score": InfraReason.STORAGE,
    "evaluate": InfraReason.EVALUATOR_HOST,
    "teardown": InfraReason.ENGINE,
}
"""Where an error of no known type leaves a session: the part its stage (`Stage`, the
session's PolarStage) leans on."""


HOST_REASONS = frozenset(
    {
        InfraReason.SANDBOX_START,
        InfraReason.IMAGE,
        InfraReason.ENGINE,
        InfraReason.EVALUATOR_HOST,
        InfraReason.LOST_HOST,
    }
)
"""Infra reasons that are the host's own (its engine, disk, images, sandbox tools), not a
shared service's (S3, the gateway, the inference backend): a session run again after one
is placed on another host where one answers."""


class SessionOutcome(BaseModel):
    """A session's outcome class; `reason` names the part of the stack for `infra_error`."""

    outcome: OutcomeClass
    reason: InfraReason | None = None
    detail: str = ""

    @property
    def label(self) -> str:
        """`infra_error:storage`, or the class alone: what counters and logs show."""
        return f"{self.outcome.value}:{self.reason.value}" if self.reason else self.outcome.value

    @property
    def is_infra(self) -> bool:
        return self.outcome == OutcomeClass.INFRA_ERROR

    @property
    def host_fault(self) -> bool:
        """An infra error of the host itself (`HOST_REASONS`)."""
        return self.is_infra and self.reason in HOST_REASONS


def infra(reason: InfraReason, detail: str) -> SessionOutcome:
    return SessionOutcome(outcome=OutcomeClass.INFRA_ERROR, reason=reason, detail=detail)


def error_outcome(error_type: str | None, stage: str | None) -> SessionOutcome:
    """The outcome of a session that ended `error` in `stage` with `error_type`."""
    if error_type in TASK_ERRORS:
        return SessionOutcome(outcome=OutcomeClass.TASK_ERROR, detail=f"{stage}: {error_type}")
    reason = INFRA_ERRORS.get(error_type or "") or STAGE_REASONS.get(stage or "")
    return infra(reason or InfraReason.ENGINE, f"{stage}: {error_type or 'error'}")


def classify(
    status: SessionStatus,
    *,
    reward: float | None = None,
    harness_started: bool | None = None,
    unserved_calls: int = 0,
    unserved_by_gateway: int = 0,
    error_type: str | None = None,
    error_stage: str | None = None,
) -> SessionOutcome | None:
    """The outcome of a session (see the module docstring); None for a cancelled one.

    `harness_started`: whether the run's started marker was seen (None: not known, trust the
    status); `unserved_calls`: the calls of that run the gateway could not serve;
    `unserved_by_gateway`: of those, the ones the gateway itself failed (unreachable, or a
    completion it could not record): the reason is then `gateway`, not the backend.
    """
    if status == SessionStatus.CANCELLED:
        return None
    if status == SessionStatus.ERROR:
        return error_outcome(error_type, error_stage)
    if harness_started is False:
        return infra(
            InfraReason.SANDBOX_START,
            f"the harness never started (its run ended {status.value} before the marker)",
        )
    if status in (SessionStatus.HARNESS_FAILED, SessionStatus.TIMEOUT) and unserved_calls > 0:
        if unserved_by_gateway > 0:
            return infra(
                InfraReason.GATEWAY,
                f"the harness ended {status.value} after {unserved_by_gateway} model call(s) "
                "the gateway itself failed (unreachable, or it could not record them)",
            )
        return infra(
            InfraReason.INFERENCE_BACKEND,
            f"the harness ended {status.value} after {unserved_calls} model call(s) the "
            "gateway could not serve",
        )
    if status == SessionStatus.TIMEOUT:
        return SessionOutcome(outcome=OutcomeClass.TIMEOUT)
    if status == SessionStatus.HARNESS_FAILED:
        return SessionOutcome(outcome=OutcomeClass.POLICY_FAILURE, detail="the harness failed")
    if reward is not None and reward <= 0:
        return SessionOutcome(outcome=OutcomeClass.POLICY_FAILURE, detail=f"graded {reward}")
    return SessionOutcome(outcome=OutcomeClass.OK)


def count_unserved(records: list[CompletionRecord], attempt: int) -> int:
    """The recorded calls of run `attempt` the gateway could not serve (it records an
    upstream failure with its status before it answers it)."""
    return sum(1 for r in records if r.attempt == attempt and r.status_code >= UNSERVED_STATUS)


def count_outcomes(outcomes: list[SessionOutcome | None]) -> dict[str, int]:
    """How many sessions ended in each class (`infra_error` also by `infra_error:reason`)."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        if outcome is None:
            continue
        counts[outcome.outcome.value] = counts.get(outcome.outcome.value, 0) + 1
        if outcome.reason is not None:
            counts[outcome.label] = counts.get(outcome.label, 0) + 1
    return counts

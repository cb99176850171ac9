"""Stage contracts: the inputs and outputs of Polar's workflows and activities.

Everything goes through Temporal's pydantic data converter, so field
changes must stay compatible with stored workflow histories.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import (
    BaseModel,
    Field,
    computed_field,
)
from temporalio.exceptions import ApplicationError

from polar.ids import SessionId
from polar.outcomes import TASK_ERRORS, SessionOutcome, classify, count_outcomes
from polar.records import SessionStatus
from polar.tasks.collect_spec import CollectSpec
from polar.tasks.spec import (
    BuilderSpec,
    EvaluatorSpec,
    HarnessSpec,
    NetworkSpec,
    PrepareAction,
    RuntimeSpec,
    Source,
    TaskSpec,
)
from polar.tasks.steps import TaskStep


class SpecRef(BaseModel):
    """Where a task's full TaskSpec lies in S3 and what it hashes to (polar/tasks/spec_ref.py)."""

    key: str
    sha256: str
    size: int


class SessionSpec(BaseModel):
    """Input of one Session child workflow."""

    session_id: SessionId
    index: int
    task: TaskSpec
    spec_ref: SpecRef | None = None
    """Set when `task` is a slim copy: the full spec (instruction, test patch) is in S3."""
    fresh_eval_runtime: bool = False
    """The task's evaluator grades in a fresh runtime, as the evaluator itself declares
    (activities/evaluators: `needs_fresh_runtime`): the session prepares it while the harness
    runs. The RolloutTask sets it from its worker's evaluators (workflows/rollout_task.py);
    False: the evaluator prepares any runtime it needs itself."""


NON_RETRYABLE_ERRORS: tuple[str, ...] = (
    *TASK_ERRORS,
    "WrongHost",
    "RuntimeNotFound",
    "RuntimeUnfit",
)
"""ApplicationError types that mean "this input cannot work": never retried. Every other
failure of a stage is retried (workflows/stages.py); raise these with `invalid_input`."""


def invalid_input(message: str, error_type: str) -> ApplicationError:
    """The non-retryable error of a stage whose input cannot work (`error_type` must be one
    of NON_RETRYABLE_ERRORS, the one list the retry policies read)."""
    if error_type not in NON_RETRYABLE_ERRORS:
        raise ValueError(f"{error_type!r} is not in NON_RETRYABLE_ERRORS")
    return ApplicationError(message, type=error_type, non_retryable=True)


class Stage(StrEnum):
    """Where a session is: the stage it shows (PolarStage, progress) and books time to."""

    PENDING = "pending"
    PREPARE = "prepare"
    RUN = "run"
    BUILD = "build"
    EVALUATE = "evaluate"
    SCORE = "score"
    TEARDOWN = "teardown"
    DONE = "done"


class RuntimeHandle(BaseModel):
    """What prepare_runtime hands to later stages."""

    kind: str
    session_id: str
    workdir: str
    host: str
    baseline: str | None = None
    """The workspace's git commit right after prepare (made by Polar when the source is not a
    git work tree): what the session's changes are diffed against. None: prepared by older
    code, or the workspace has no git."""
    host_id: str | None = None
    """The host holding the runtime (`POLAR_HOST_ID` of the worker that prepared it); None:
    prepared by older code."""
    host_queue: str | None = None
    """That host's queue prefix (`{queue}-host-{host_id}`): later stages that touch the
    runtime go to its `-init`/`-run`/`-postrun` queues. None: the shared queues."""
    runtime_id: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """This placement's claim on the session's runtime on its host (activities/runtime_claims.py):
    a release or teardown removes the runtime only while the claim is still its own, so an
    earlier placement's late release never removes a newer one's. None: a bare handle, or
    older code."""
    network: NetworkSpec | None = Field(default=None, exclude_if=lambda v: v is None)
    """The task's network, admitted by the worker that prepared the runtime (its egress on):
    the run serves it through the egress proxy. None: sealed (left out of the JSON)."""
    harness_user: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The user the harness runs as (the RuntimeSpec's `harness_user`, a container runtime's):
    the run stage passes it to `Runtime.run`. None: the image's user (left out of the JSON)."""
    local_hosts: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)
    """The names of the session's own services (its compose sidecars) that its commands reach
    directly: never through the egress proxy (`NO_PROXY`). Empty: none (left out of the JSON)."""

    def for_step(self, step: TaskStep | None) -> RuntimeHandle:
        """This handle for `step`'s harness run: as its own user, with its own network (a
        sealed one: none), where it names them; as prepared otherwise."""
        update: dict[str, object] = {}
        if step is not None and step.harness_user is not None:
            update["harness_user"] = step.harness_user
        if step is not None and step.network is not None:
            update["network"] = None if step.network.sealed else step.network
        return self.model_copy(update=update) if update else self


class TeardownResult(BaseModel):
    """What teardown found: `found` False means there was no runtime to remove."""

    session_id: str
    host_id: str
    found: bool


class PrepareRequest(BaseModel):
    session_id: str
    task_id: str
    runtime: RuntimeSpec
    source: Source | None = None
    avoid_hosts: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Hosts whose own fault ended an earlier placement of the session (polar/outcomes.py:
    `HOST_REASONS`). A worker there declines the first `avoid_tries` tries (`AvoidedHost`,
    retried on the shared queue, where another host's worker can take it) and takes a later
    one, so a deployment of one host still serves the session."""
    avoid_tries: int = Field(default=0, ge=0, exclude_if=lambda v: v == 0)
    step_users: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)
    """The users a multi-step task's steps run their harness as besides the runtime's
    `harness_user` (`TaskStep.harness_user`): each is checked in the image at prepare, as
    that one is. Empty: none (left out of the JSON)."""
    step_networks: list[NetworkSpec] = Field(default_factory=list, exclude_if=lambda v: not v)
    """The networks a multi-step task's steps give their harness besides the runtime's
    (`TaskStep.network`): a worker that could not serve one refuses the session at prepare,
    as it refuses the runtime's. Empty: none (left out of the JSON)."""


class HarnessRequest(BaseModel):
    session_id: str
    task_id: str
    runtime: RuntimeHandle
    harness: HarnessSpec
    instruction: str
    budget_s: float
    spec_ref: SpecRef | None = None
    """Set when `instruction` was left out: the activity reads it from the stored spec."""
    attempt_base: int = 0
    """Added to the activity's attempt number: a re-issued run stage (another placement of the
    session) records its calls and logs under attempts of its own."""
    step: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """A multi-step task's step (polar/tasks/steps.py): `instruction` is its, and the harness
    sees its name in `POLAR_STEP`; None: a one-step task."""
    before: list[PrepareAction] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Run in the runtime before the harness starts (a step's `prepare`); a failure is the
    task's error, not retried."""
    collect: CollectSpec | None = Field(default=None, exclude_if=lambda v: v is None)
    """Run and copied out of the runtime after the harness was reaped (the runtime's
    `collect` plus the step's); None: nothing."""


class CollectedArtifacts(BaseModel):
    """What a run's collection (`RuntimeSpec.collect`) kept in S3: the folder of its files
    (`prefix`, ending in `/`) and its manifest there (activities/artifact_collection.py)."""

    prefix: str
    manifest_key: str
    files: int = 0
    bytes: int = 0
    missing: int = 0
    """Artifacts not found, or not copied (a link, a failed copy)."""
    limit_hit: bool = False
    """The files or bytes bound was reached: some were left out (the manifest names them)."""


class HarnessResult(BaseModel):
    status: Literal["completed", "failed", "timeout"]
    exit_code: int | None
    duration_s: float
    stdout_key: str
    stderr_key: str
    attempt: int
    artifact_keys: list[str] = Field(
        default_factory=list,
        description="the harness's native logs and $POLAR_ARTIFACTS_DIR files kept in S3",
    )
    artifacts_skipped: list[str] = Field(
        default_factory=list,
        description="files of $POLAR_ARTIFACTS_DIR not kept, and why (symlink, size, count)",
    )
    detail: str | None = Field(
        default=None, description="why the runtime stopped the harness, e.g. a resource limit"
    )
    relayed_calls: int | None = Field(
        default=None,
        description="requests the session's sealed channel sent on to the gateway; None when "
        "the harness could reach the gateway another way (an unsealed runtime)",
    )
    harness_started: bool | None = Field(
        default=None,
        description="the started marker (activities/runtimes/started_marker.py) was seen: the "
        "sandbox was up and the harness command began; False: it ended before that (infra); "
        "None: not known (older code)",
    )
    unserved_calls: int = Field(
        default=0,
        description="this attempt's model calls the gateway could not serve (5xx: upstream "
        "errors, timeouts, no replica reachable), from its failed records",
    )
    unserved_by_gateway: int = Field(
        default=0,
        description="of those, the calls the gateway itself failed: unreachable, or a "
        "completion it could not record (infra reason `gateway`)",
    )
    collected: CollectedArtifacts | None = Field(default=None, exclude_if=lambda v: v is None)
    """What the run's collection kept (None: the request asked for none)."""


class BuildRequest(BaseModel):
    session_id: str
    task_id: str
    harness: str
    builder: BuilderSpec
    policy_version: int | None = None
    after_attempt: int = 0
    """Only records of run attempts above this become traces: the runs of placements given
    up for an infra error (run again on fresh ground) keep their records in S3, left out of
    training as `earlier_placement` (their partial work never earned the final reward)."""
    joined_attempts: list[int] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Run attempts built as one (a multi-step session's steps, each run its own attempt):
    a chain goes on from one step's calls to the next's where the prompt is append-only."""


class BuildResult(BaseModel):
    traces_key: str
    num_completions: int
    num_traces: int
    num_response_tokens: int
    trace_bytes: int
    unusable_completions: int = 0
    breaks: dict[str, int] = Field(
        default_factory=dict, description="chain breaks by BreakKind (prefix_merging)"
    )
    unseen_completions: dict[str, int] = Field(
        default_factory=dict,
        description="records left out of training, by reason (client_disconnected, "
        "untrainable, resent, earlier_placement)",
    )


class EvaluateRequest(BaseModel):
    session_id: str
    task_id: str
    runtime: RuntimeHandle
    evaluator: EvaluatorSpec
    budget_s: float
    traces_key: str | None = None
    source: Source | None = None
    """The task's source: every evaluator grades in a fresh runtime made from it plus the
    session's changes (`runtime` is only read, never graded in)."""
    runtime_spec: RuntimeSpec | None = None
    """The task's runtime spec, for that fresh runtime (default: the session's kind)."""
    eval_runtime: RuntimeHandle | None = None
    """That fresh runtime, already prepared while the harness ran (prewarm); None: the
    evaluator prepares it itself. Used by the first attempt only (a retry starts fresh)."""
    spec_ref: SpecRef | None = None
    """Set when `evaluator` is slim (no test patch): the activity reads the stored spec's."""
    instruction: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The task's instruction, for a `rubric` judge (which reads the task); None without a
    rubric, or when `spec_ref` is set (the activity reads the stored spec's)."""
    collected: CollectedArtifacts | None = Field(default=None, exclude_if=lambda v: v is None)
    """The graded run's collected artifacts: put at their source paths in the fresh runtime
    before a `harbor` verifier runs (None: none)."""
    step: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """A multi-step task's step being graded: `evaluator` is its, and its report, patch and
    logs are kept under `steps/{step}/`; None: a one-step task."""


class EvaluateResult(BaseModel):
    reward: float
    """Finite and within the evaluator's `reward_range` (clamped; `detail` says so)."""
    detail: str
    log_key: str | None = None
    """The first of `log_keys` (the session's evaluation log)."""
    trace_rewards: dict[str, float] = Field(default_factory=dict)
    """Per-trace rewards the evaluator gave (trace id → reward); others get `reward`."""
    report_key: str | None = None
    """The evaluator's JSON report in S3 (swebench: per-test results and flags)."""
    log_keys: list[str] = Field(default_factory=list)
    """Every log the evaluator kept in S3 (a command's stdout and stderr, a test log)."""
    patch_key: str | None = None
    """The session's patch the evaluator graded, in S3 (`{kind}-model.patch`)."""
    components: dict[str, float] = Field(default_factory=dict, exclude_if=lambda v: not v)
    """Named reward components the evaluator read (a Harbor reward.json's), beside `reward`."""


class StepOutcome(BaseModel):
    """What became of one step of a multi-step session (`SessionResult.steps`)."""

    name: str
    status: SessionStatus
    """The step's harness run: completed, harness_failed or timeout (error: its run failed)."""
    reward: float | None = None
    """The step's grade (None: not graded, or withheld)."""
    components: dict[str, float] = Field(default_factory=dict)
    detail: str | None = None
    """The evaluation's detail, or why the step was not graded."""
    stopped: str | None = None
    """Why the steps after this one were not run (below its `min_reward`)."""


# ---------------------------------------------------------------- scoring (score_traces)
class ScoreRequest(BaseModel):
    """Input of score_traces: the session's outcome, to be given to its traces."""

    traces_key: str
    reward: float | None
    status: SessionStatus
    trace_rewards: dict[str, float] = Field(default_factory=dict)
    """Per-trace rewards the evaluator gave (trace id → reward); others follow the policy."""


class ScoreResult(BaseModel):
    """What score_traces wrote: the rewards sidecar beside the traces, which stay as built
    (polar/storage.py joins the two on reading)."""

    traces_key: str
    rewards_key: str | None = None
    """The sidecar (`sessions/{id}/traces/{builder}.rewards.json`); None: written by older
    code, the rewards are in the traces themselves."""
    num_traces: int
    num_response_tokens: int
    trace_bytes: int
    """The session's traces in S3: the traces object plus its rewards sidecar."""


# ---------------------------------------------------------------- end of scoring


class SessionResult(BaseModel):
    """Small summary of one session; traces themselves live in S3 under `traces_key`."""

    session_id: str
    task_id: str
    index: int
    status: SessionStatus
    reward: float | None = None
    harness: str
    num_completions: int = 0
    num_traces: int = 0
    num_response_tokens: int = 0
    trace_bytes: int = 0
    traces_key: str | None = None
    trace_breaks: dict[str, int] = Field(default_factory=dict)
    """Why the builder started new traces, by break kind (prefix_merging)."""
    unseen_completions: dict[str, int] = Field(default_factory=dict)
    """Records not trained on (the harness never saw their answer, or their sample is
    off-policy), by reason."""
    harness_exit_code: int | None = None
    evaluation: str | None = None
    error: str | None = None
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    hosts: list[str] = Field(default_factory=list)
    """The hosts that held the session's runtime, in order (more than one: a host was lost
    and the session went on elsewhere)."""
    warnings: list[str] = Field(default_factory=list)
    """What went wrong without failing the session (a lost host, a runtime teardown could not
    find or reach)."""
    # ---- outcome class (polar/outcomes.py): what the end says about the policy
    harness_started: bool | None = None
    """The run's started marker was seen (False: the sandbox never reached the harness)."""
    unserved_calls: int = 0
    """Model calls of the last run the gateway could not serve."""
    unserved_by_gateway: int = 0
    """Of those, the calls the gateway itself failed (unreachable, or could not record)."""
    error_type: str | None = None
    """The failing stage's error type (an ApplicationError type, `HostLost`), with `error`."""
    error_stage: str | None = None
    """The stage (activity name) that failed, with `error`."""
    infra_attempts: list[str] = Field(default_factory=list)
    """Earlier placements that ended `infra_error` and were run again, each its outcome label
    and detail; their records stay apart (attempt numbers of their own)."""
    steps: list[StepOutcome] = Field(default_factory=list, exclude_if=lambda v: not v)
    """A multi-step session's steps as run, in order (the reward follows the task's
    `step_reward`); empty for a one-step task."""
    artifacts: dict[str, str] = Field(
        default_factory=dict,
        description="what the session stored in S3, name → key (polar/session_artifacts.py): "
        "`harness.stdout`, `harness.stderr` and `harness/<path>` (the last run's logs and "
        "files), `traces`, `traces.rewards`, `evaluation.report`, `evaluation.patch` and "
        "`evaluation/<log>`; a name ending in `/` is a folder (its keys: list the prefix)",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def outcome(self) -> SessionOutcome | None:
        """The session's outcome class; None while cancelled."""
        return classify(
            self.status,
            reward=self.reward,
            harness_started=self.harness_started,
            unserved_calls=self.unserved_calls,
            unserved_by_gateway=self.unserved_by_gateway,
            error_type=self.error_type,
            error_stage=self.error_stage,
        )


class TaskResult(BaseModel):
    task_id: str
    sessions: list[SessionResult]
    stopped_early: bool = False
    """min_usable_sessions were in before every session finished; the rest were cancelled."""
    policy_version: int | None = None
    artifacts_omitted: bool = False
    """The sessions' `artifacts` maps were left out of this result to keep it well under
    Temporal's payload limit (a task of many sessions); each Session workflow's own result
    still holds its map (`polar result SESSION`)."""

    @property
    def usable(self) -> list[SessionResult]:
        """Sessions that completed with traces."""
        return [s for s in self.sessions if s.status == SessionStatus.COMPLETED and s.num_traces]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def outcome_counts(self) -> dict[str, int]:
        """Sessions by outcome class (`infra_error` also by `infra_error:reason`)."""
        return count_outcomes([s.outcome for s in self.sessions])

    @property
    def mean_reward(self) -> float | None:
        rewards = [s.reward for s in self.sessions if s.reward is not None]
        return sum(rewards) / len(rewards) if rewards else None


class SessionProgress(BaseModel):
    """Answer of the Session workflow's `progress` query."""

    session_id: str
    stage: Stage
    status: SessionStatus | None = None
    detail: str = ""

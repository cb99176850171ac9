"""The stage table: every activity Polar's workflows run, described in one place.

Each entry names the activity, the session stage it shows in the Web UI and
books its time to, its input and output contracts, the pool (task queue
family) that serves it, whether it follows the session's runtime to that
runtime's host, its start-to-close timeout as a rule over the task's
`timeouts`, and its retry rule. The Session workflow issues stages from it,
the worker registers each pool's activities from it (activities/worker.py),
the queue names derive from its pools (workflows/queues.py) and the metrics
label by it (activities/observability.py).

Invalid input is the only thing never retried: an activity that finds its
input unusable raises an ApplicationError whose type is in
`NON_RETRYABLE_ERRORS` (polar/contracts.py), which every retry policy here
also lists; anything else is retried up to the task's `max_attempts`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel
from temporalio.common import RetryPolicy

from polar.contracts import (
    NON_RETRYABLE_ERRORS,
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
    SpecRef,
    Stage,
    TeardownResult,
)
from polar.gpus import GpuHost, GpuPlacement
from polar.tasks.spec import TaskSpec, Timeouts


class Pool(StrEnum):
    """A family of task queues with its own worker slots: `{queue}-{pool}` (shared) and
    `{queue}-host-{host_id}-{pool}` (one host's, for stages that follow the runtime)."""

    INIT = "init"
    RUN = "run"
    POSTRUN = "postrun"


POOLS: tuple[Pool, ...] = tuple(Pool)

HARNESS_BACKSTOP_S = 120.0
"""run_harness enforces the harness budget itself (it stops the harness at `harness_s`);
its start-to-close timeout is the budget plus this, for a worker that cannot."""
EVALUATE_BACKSTOP_S = 60.0
"""evaluate enforces `evaluate_s` on the tests it runs; the timeout adds this for the rest."""
PROBE_TIMEOUT_S = 30.0
"""host_alive answers at once; a probe that takes longer than this is a host that is not."""
RELEASE_ATTEMPTS = 5
"""teardown and release_runtime: a few tries, then the session says what was left behind."""

Retry = Literal["session", "release", "storage", "once"]
"""`session`: the task's `max_attempts` with backoff (invalid input never retried);
`release`: RELEASE_ATTEMPTS tries; `storage`: STORAGE_ATTEMPTS tries, backoff up to 10 s
(S3 only, nothing to undo); `once`: a single attempt (the caller decides)."""
STORAGE_ATTEMPTS = 10

In = TypeVar("In", bound=BaseModel | None)
Out = TypeVar("Out", bound=BaseModel | None)


@dataclass(frozen=True)
class StageActivity(Generic[In, Out]):
    """One activity of the table (see the module docstring): takes an `In`, returns an `Out`
    (None: no argument, no result), so a stage call is typed by its entry."""

    activity: str
    stage: Stage | None
    input: type[In] | None
    output: type[Out] | None
    pool: Pool | None
    """None: the host's probe queue (`{queue}-host-{host_id}`)."""
    on_host: bool
    timeout: Callable[[Timeouts], float]
    retry: Retry
    heartbeat: bool

    def start_to_close(self, timeouts: Timeouts) -> timedelta:
        return timedelta(seconds=self.timeout(timeouts))

    def retry_policy(self, timeouts: Timeouts) -> RetryPolicy:
        if self.retry == "once":
            return RetryPolicy(maximum_attempts=1)
        if self.retry == "release":
            return RetryPolicy(maximum_attempts=RELEASE_ATTEMPTS)
        if self.retry == "storage":
            return RetryPolicy(
                maximum_interval=timedelta(seconds=10), maximum_attempts=STORAGE_ATTEMPTS
            )
        return session_retry_policy(timeouts)


def session_retry_policy(timeouts: Timeouts) -> RetryPolicy:
    """Backoff from 1 s to 30 s, `max_attempts` tries, invalid input never retried."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=timeouts.max_attempts,
        non_retryable_error_types=list(NON_RETRYABLE_ERRORS),
    )


def _stage(
    activity: str,
    stage: Stage | None,
    input: type[In] | None,
    output: type[Out] | None,
    pool: Pool | None,
    timeout: Callable[[Timeouts], float],
    *,
    on_host: bool = False,
    retry: Retry = "session",
    heartbeat: bool = True,
) -> StageActivity[In, Out]:
    return StageActivity(activity, stage, input, output, pool, on_host, timeout, retry, heartbeat)


PREPARE_RUNTIME = _stage(
    "prepare_runtime",
    Stage.PREPARE,
    PrepareRequest,
    RuntimeHandle,
    Pool.INIT,
    lambda t: t.prepare_s,
)
# a GPU session's host: one whose worker declares its GPUs (polar/gpus.py), then prepared there
PLACE_GPU_SESSION = _stage(
    "place_gpu_session",
    Stage.PREPARE,
    GpuPlacement,
    GpuHost,
    Pool.INIT,
    lambda t: 60.0,
    heartbeat=False,
)
PREPARE_EVAL_RUNTIME = _stage(
    "prepare_eval_runtime",
    Stage.RUN,  # prepared while the harness runs, off the critical path
    PrepareRequest,
    RuntimeHandle,
    Pool.INIT,
    lambda t: t.prepare_s,
    on_host=True,
)
RUN_HARNESS = _stage(
    "run_harness",
    Stage.RUN,
    HarnessRequest,
    HarnessResult,
    Pool.RUN,
    lambda t: t.harness_s + HARNESS_BACKSTOP_S,
    on_host=True,
)
BUILD_TRAJECTORY = _stage(
    "build_trajectory",
    Stage.BUILD,
    BuildRequest,
    BuildResult,
    Pool.POSTRUN,
    lambda t: t.build_s,
)
EVALUATE = _stage(
    "evaluate",
    Stage.EVALUATE,
    EvaluateRequest,
    EvaluateResult,
    Pool.POSTRUN,
    lambda t: t.evaluate_s + EVALUATE_BACKSTOP_S,
    on_host=True,
)
SCORE_TRACES = _stage(
    "score_traces",
    Stage.SCORE,
    ScoreRequest,
    ScoreResult,
    Pool.POSTRUN,
    lambda t: t.build_s,
)
TEARDOWN = _stage(
    "teardown",
    Stage.TEARDOWN,
    RuntimeHandle,
    TeardownResult,
    Pool.INIT,
    lambda t: t.teardown_s,
    on_host=True,
    retry="release",
    heartbeat=False,
)
# a lost host's runtime, released (not awaited) in case the host comes back: teardown's rules
RELEASE_RUNTIME = replace(TEARDOWN, activity="release_runtime")
HOST_ALIVE: StageActivity[None, None] = _stage(
    "host_alive",
    None,
    None,
    None,
    None,
    lambda t: PROBE_TIMEOUT_S,
    on_host=True,
    retry="once",
    heartbeat=False,
)
STORE_TASK_SPEC = _stage(
    "store_task_spec",
    None,  # the RolloutTask's, before any session
    TaskSpec,
    SpecRef,
    Pool.INIT,
    lambda t: 60.0,
    retry="storage",
    heartbeat=False,
)

STAGE_ACTIVITIES: dict[str, StageActivity[Any, Any]] = {
    s.activity: s
    for s in (
        PREPARE_RUNTIME,
        PLACE_GPU_SESSION,
        PREPARE_EVAL_RUNTIME,
        RUN_HARNESS,
        BUILD_TRAJECTORY,
        EVALUATE,
        SCORE_TRACES,
        TEARDOWN,
        RELEASE_RUNTIME,
        HOST_ALIVE,
        STORE_TASK_SPEC,
    )
}
"""Every activity Polar's workflows run, by activity name."""


def activities_of(pool: Pool | None) -> list[str]:
    """The activity names a pool serves (None: a host's probe queue)."""
    return [s.activity for s in STAGE_ACTIVITIES.values() if s.pool == pool]


HOST_STAGES = frozenset(s.activity for s in STAGE_ACTIVITIES.values() if s.on_host)
"""Activities that go to the runtime's host (its per-pool queues, or its probe queue)."""

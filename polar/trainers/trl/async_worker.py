"""TRL 1.16's `AsyncGRPOTrainer`: Polar as its rollout worker (`PolarRolloutWorker`).

`trl.experimental.async_grpo`'s `RolloutWorkerProtocol` and `RolloutSample`: Polar groups
become samples with the group's advantages (see `PolarRolloutWorker`); the weights come back
through `PolarWeightTransfer` (polar/trainers/trl/weight_transfer.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from polar.advantages import trace_advantages
from polar.client.sdk import PolarClient, TaskRun
from polar.contracts import TaskResult
from polar.records import Trace
from polar.settings import Settings, get_settings
from polar.tasks.spec import TaskSpec
from polar.trainers._sessions import (
    UnscoredBatch,
    absent_reason,
    chains,
    check_min_scored,
    require_scored,
    task_with,
    trainable,
    unscored,
)
from polar.trainers.trl.loop_thread import LoopThread

log = logging.getLogger("polar.trainers.trl")

StalePolicy = Literal["drop", "downweight"]


def rollout_samples(
    traces: Sequence[Trace],
    advantages: dict[str, float | None],
    *,
    group_id: int,
    model_version: int,
    prompt: Any,
    metrics: dict[str, float] | None = None,
    weight: float = 1.0,
) -> list[Any]:
    """TRL `RolloutSample`s of one group: one per trace (a session whose prefix chain broke
    gives several, each with its session's advantage), exactly as Polar traced them:
    `input_ids` = prompt ids + response ids, `completion_mask` = 0 over the prompt then the
    loss mask, `old_log_probs` = 0.0 over the prompt then the sampled logprobs. Traces whose
    advantage is None (an unscored session) give none. `weight` scales the advantage."""
    import numpy as np
    from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

    samples = []
    for trace in traces:
        advantage = advantages.get(trace.trace_id)
        if advantage is None or not any(trace.loss_mask):
            continue
        context = len(trace.prompt_ids)
        reward = trace.reward
        samples.append(
            RolloutSample(
                prompt=list(trace.prompt_messages) or prompt,
                completion=[trace.response_message] if trace.response_message else [],
                input_ids=np.asarray(list(trace.prompt_ids) + list(trace.response_ids), np.int64),
                completion_mask=np.asarray([0] * context + list(trace.loss_mask), np.int64),
                old_log_probs=np.asarray(
                    [0.0] * context + list(trace.response_logprobs), np.float32
                ),
                advantage=float(advantage) * weight,
                model_version=model_version,
                group_id=group_id,
                metrics={
                    "reward": float("nan") if reward is None else float(reward),
                    **(metrics or {}),
                },
                enqueued_at=time.time(),
            )
        )
    return samples


@dataclass
class WorkerCounts:
    """What the rollout worker produced and left out, and why."""

    groups: int = 0
    samples: int = 0
    sessions: int = 0
    dropped_stale_groups: int = 0
    dropped_stale_samples: int = 0
    downweighted_samples: int = 0
    filtered_zero_spread: int = 0
    failed_tasks: int = 0
    left_out_sessions: Counter[str] = field(default_factory=Counter)
    """sessions not trained on, by label (`task_error`, `infra_error:storage`, `no reward`,
    `cancelled`: stragglers cancelled by the early stop)."""
    left_out_examples: dict[str, str] = field(default_factory=dict)
    """one example detail of each label (the first seen)."""


class PolarRolloutWorker:
    """`AsyncGRPOTrainer(rollout_worker=...)`: Polar groups as TRL `RolloutSample`s.

    A thread of its own keeps `max_in_flight` Polar tasks running, each one group
    (`group_size` sessions, plus `extra_sessions` that Polar's early stop
    (`min_usable_sessions`) cancels once `group_size` are usable, so a group is handed over
    without waiting for its slowest sessions), each tagged with the live policy version.
    As each task finishes, its trainable sessions' traces become samples with the group's
    advantages (`polar.advantages`, under the reward policy the task's builder stamps:
    `reward_policy`), pushed onto `rollout_buffer`.

    Left out, and counted (`counts`, and in `metrics_queue`): sessions that are not trainable
    (an infrastructure failure or a cancelled straggler is never a zero-reward sample),
    by outcome label; groups with no reward spread or fewer than two graded sessions
    (`filter_zero_spread`); groups more than `max_staleness` versions behind
    (`stale="drop"`), or kept with their advantage scaled by `stale_weight` per version past
    the bound (`stale="downweight"`: then give TRL's own `max_staleness` room for them).

    A group with no scored session, or fewer than the share `min_scored` of the `group_size`
    it asked for (None: never), stops the worker with `UnscoredBatch`, which `check_health`
    raises into TRL's training loop: a run whose every session fails never trains on
    nothing."""

    def __init__(
        self,
        task: TaskSpec | dict[str, Any],
        *,
        settings: Settings | None = None,
        group_size: int = 8,
        extra_sessions: int = 0,
        max_in_flight: int = 2,
        max_staleness: int = 1,
        stale: StalePolicy = "drop",
        stale_weight: float = 0.5,
        reward_policy: Literal["broadcast", "session_normalized"] | None = None,
        filter_zero_spread: bool = True,
        min_scored: float | None = 0.0,
        queue_maxsize: int = 0,
        timeout_s: float = 1800.0,
    ) -> None:
        if group_size < 2:
            raise ValueError("group_size must be >= 2 (a group's advantages need two rewards)")
        if stale not in ("drop", "downweight"):
            raise ValueError(f"stale must be 'drop' or 'downweight', not {stale!r}")
        spec = task if isinstance(task, TaskSpec) else TaskSpec.model_validate(task)
        if reward_policy is not None:
            spec = spec.model_copy(deep=True)
            spec.builder.config = {**spec.builder.config, "reward": reward_policy}
        self.template = spec
        self.prompt = [{"role": "user", "content": spec.instruction}]
        self.settings = settings or get_settings()
        self.group_size = group_size
        self.extra_sessions = max(0, extra_sessions)
        self.max_in_flight = max(1, max_in_flight)
        self.max_staleness = max_staleness
        self.stale = stale
        self.stale_weight = stale_weight
        self.filter_zero_spread = filter_zero_spread
        self.min_scored = check_min_scored(min_scored)
        self.timeout_s = timeout_s
        self.rollout_buffer: queue.Queue[Any] = queue.Queue(maxsize=queue_maxsize)
        self.metrics_queue: queue.Queue[dict[str, float | tuple[float, float]]] = queue.Queue(
            maxsize=4096
        )
        self.model_version = 0
        self.counts = WorkerCounts()
        self._loop: LoopThread | None = None
        self._job: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._last_progress = time.time()
        self._started_at = time.time()
        self._next_group = 0
        self.handed: list[dict[str, Any]] = []
        """each group handed over: its task's workflow id, group id, version, sample count."""

    # ---------------------------------------------------------------- the protocol
    def start(self) -> None:
        """Begin submitting tasks and producing samples (on a thread of its own)."""
        if self._loop is not None:
            return
        self._loop = LoopThread()
        self._started_at = self._last_progress = time.time()

        async def spawn() -> asyncio.Task[None]:
            task = asyncio.create_task(self._produce())
            task.add_done_callback(self._ended)
            return task

        self._job = self._loop.run(spawn())

    def stop(self) -> None:
        """Stop producing; the tasks in flight are cancelled (their sessions torn down)."""
        if self._loop is None:
            return
        loop, self._loop = self._loop, None
        job = self._job

        async def halt() -> None:
            if job is not None and not job.done():
                job.cancel()
                with contextlib.suppress(BaseException):
                    await job

        loop.run(halt(), timeout_s=120)
        loop.close()

    def update_model_version(self, model_version: int) -> None:
        """The live policy version: new tasks are tagged with it, staleness measured from it."""
        self.model_version = int(model_version)

    def check_health(self, stale_after_s: float) -> None:
        """Raise when the producer failed (an `UnscoredBatch` as itself), or has handed nothing
        over for `stale_after_s`."""
        if isinstance(self._failure, UnscoredBatch):
            raise self._failure
        if self._failure is not None:
            raise RuntimeError("the Polar rollout worker failed") from self._failure
        if self._loop is None:
            raise RuntimeError("the Polar rollout worker is not running (start() not called)")
        idle = time.time() - self._last_progress
        if idle > stale_after_s:
            raise RuntimeError(
                f"Polar has produced no group for {idle:.0f}s (> {stale_after_s:.0f}s): "
                f"{self.counts.failed_tasks} tasks failed, "
                f"left out {dict(self.counts.left_out_sessions)}"
            )

    # ---------------------------------------------------------------- producing
    def _ended(self, job: asyncio.Task[None]) -> None:
        if not job.cancelled() and job.exception() is not None:
            self._failure = job.exception()
            log.error("Polar rollout worker failed: %s", self._failure)

    def task(self) -> TaskSpec:
        """One group's task at the live version (with its extra sessions and early stop)."""
        extra = self.extra_sessions
        return task_with(
            self.template,
            num_sessions=self.group_size + extra,
            min_usable_sessions=self.group_size if extra else None,
            policy_version=self.model_version,
        )

    async def _produce(self) -> None:
        polar = await PolarClient.connect(self.settings)
        in_flight: dict[asyncio.Task[TaskResult], TaskRun] = {}
        try:
            while True:
                while len(in_flight) < self.max_in_flight:
                    run = await polar.submit(self.task())
                    in_flight[asyncio.ensure_future(polar.wait(run, self.timeout_s))] = run
                done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    run = in_flight.pop(fut)
                    try:
                        result = fut.result()
                    except Exception as exc:  # the task's workflow failed: no group, counted
                        self.counts.failed_tasks += 1
                        log.warning("Polar task %s failed: %s", run.workflow_id, exc)
                        continue
                    await self._hand_over(polar, result, run.workflow_id)
        finally:
            for fut, run in in_flight.items():
                fut.cancel()
                with contextlib.suppress(Exception):
                    await polar.cancel(run)

    async def _hand_over(self, polar: PolarClient, result: TaskResult, workflow_id: str) -> None:
        """One finished task: its samples onto the buffer, or why not, counted."""
        started = time.monotonic()
        self.counts.sessions += len(result.sessions)
        reasons = [None if trainable(s) else unscored(s, absent_reason(s)) for s in result.sessions]
        for why in reasons:
            if why is not None:
                self.counts.left_out_sessions[why.label] += 1
                self.counts.left_out_examples.setdefault(why.label, why.detail)
        require_scored(
            reasons,
            self.min_scored,
            asked=self.group_size,
            what=f"Polar task {workflow_id}",
            note="PolarRolloutWorker(min_scored=None) lets such groups pass (they train nothing)",
        )
        rewards: dict[str, float | None] = {}
        traces: list[Trace] = []
        for session, why in zip(result.sessions, reasons, strict=True):
            if why is None:
                rewards[session.session_id] = session.reward
                traces += await asyncio.to_thread(polar.load_traces, session)
        version = result.policy_version if result.policy_version is not None else 0
        staleness = self.model_version - version
        self._last_progress = time.time()
        metrics: dict[str, float | tuple[float, float]] = {
            "polar/staleness": float(staleness),
            "polar/sessions_per_s": self.counts.sessions
            / max(time.time() - self._started_at, 1e-9),
        }
        scored = [r for r in rewards.values() if r is not None]
        if scored:
            metrics["polar/mean_reward"] = statistics.fmean(scored)
        for stage in ("init", "run", "build", "evaluate", "score"):
            times = [s.stage_seconds[stage] for s in result.sessions if stage in s.stage_seconds]
            if times:
                metrics[f"polar/stage_s/{stage}"] = statistics.fmean(times)
        weight = 1.0
        if staleness > self.max_staleness:
            if self.stale == "drop":
                self.counts.dropped_stale_groups += 1
                self.counts.dropped_stale_samples += len(traces)
                self._push_metrics(metrics)
                return
            weight = self.stale_weight ** (staleness - self.max_staleness)
        if len(scored) < 2 or (self.filter_zero_spread and max(scored) == min(scored)):
            self.counts.filtered_zero_spread += 1
            self._push_metrics(metrics)
            return
        advantages = trace_advantages(traces, rewards)
        samples = rollout_samples(
            chains(traces),
            advantages,
            group_id=self._next_group,
            model_version=version,
            prompt=self.prompt,
            weight=weight,
        )
        self._next_group += 1
        if weight != 1.0:
            self.counts.downweighted_samples += len(samples)
        for sample in samples:
            await asyncio.to_thread(self.rollout_buffer.put, sample)
        self.handed.append(
            {
                "workflow_id": workflow_id,
                "group_id": samples[0].group_id if samples else None,
                "version": version,
                "samples": len(samples),
            }
        )
        self.counts.groups += 1
        self.counts.samples += len(samples)
        metrics["polar/hand_over_s"] = time.monotonic() - started
        self._push_metrics(metrics)

    def _push_metrics(self, metrics: dict[str, float | tuple[float, float]]) -> None:
        """One entry of `metrics_queue`: this group's figures and the running counts."""
        counts = self.counts
        entry = dict(metrics)
        entry.update(
            {
                "polar/groups_total": float(counts.groups),
                "polar/dropped_stale_groups_total": float(counts.dropped_stale_groups),
                "polar/downweighted_samples_total": float(counts.downweighted_samples),
                "polar/filtered_zero_spread_total": float(counts.filtered_zero_spread),
                "polar/failed_tasks_total": float(counts.failed_tasks),
                "polar/left_out_sessions_total": float(sum(counts.left_out_sessions.values())),
            }
        )
        with contextlib.suppress(queue.Full):  # never block production on metrics
            self.metrics_queue.put_nowait(entry)

"""TRL 1.16: Polar as `GRPOTrainer`'s rollout function, and as `AsyncGRPOTrainer`'s rollout
worker and weight transfer (`PolarRolloutWorker`, `PolarWeightTransfer`: see their docstrings).

    from trl import GRPOConfig, GRPOTrainer
    from polar.trainers.trl import PolarRolloutFunc, polar_reward

    rollout = PolarRolloutFunc(task, settings=settings, weights=InPlaceReload.from_settings(s))
    trainer = GRPOTrainer(model=policy_dir, reward_funcs=polar_reward, args=GRPOConfig(...),
                          train_dataset=dataset, rollout_func=rollout)
    trainer.train(); rollout.close()

What TRL passes and expects (`GRPOTrainer._generate`): the rollout function gets the
per-process prompt slice, each prompt repeated `num_generations` times in a row (TRL's
`RepeatSampler`), and the trainer; it returns one row per prompt: `prompt_ids`,
`completion_ids`, `logprobs`, and optionally `env_mask` (1 = a model token the loss is taken
over, 0 = context). Any other key is forwarded, row by row, to the reward functions.

What Polar gives back for each run of `num_generations` equal prompts: one Polar task (the
`task` template, the prompt's last user text as its instruction, `num_generations` sessions,
tagged with the trainer's policy version), and one row per session, in session order:

* `prompt_ids`, `completion_ids`, `logprobs`, `env_mask`: the session's first chain (the root
  context, as `polar.trainers.verl` takes it) exactly as Polar traced it, never retokenised:
  `prompt_ids`, `response_ids`, `response_logprobs` and `loss_mask` (the interstitial tokens
  between turns are mask 0, logprob 0.0). A session whose prefix chain broke has its other
  chains left out: TRL needs exactly one row per generation; `polar_chains` and
  `polar_left_out_tokens` say what was left out.
* `polar_reward`: the session's reward (what `polar_reward` hands TRL), `polar_policy_version`,
  `polar_staleness` (trainer version − sampled version), `polar_session_id`, `polar_trace_id`,
  `polar_workflow_id`, `polar_status`.
* A session that is not trainable (no reward, an `error` or `cancelled` status: an
  infrastructure failure, not an outcome of the policy) becomes a row with one end-of-turn
  token, mask 0 and reward None: TRL leaves a None reward out of the group baseline and gives
  it advantage 0, so it is neither trained on nor a zero-reward sample.

Advantages and the loss are TRL's own; rewards are Polar's.

Ahead of time: after returning a batch, the function submits the next batch's tasks (by
default the same prompts again, `prefetch="repeat"`, which is right for datasets that repeat a
task family; `prefetch=False` turns it off), so those sessions run while TRL computes the loss
and steps. At the next call, a prefetched task is used when its prompt matches and it is at
most `max_staleness` versions behind; unmatched or older ones are cancelled and counted.

Weights: at each call after an optimizer step (TRL's own `use_vllm` path does the same), the
trainer's model is saved into the served model directory and `weights` (an `InPlaceReload`)
pauses the gateway, reloads vLLM in place and resumes; the policy version is then the
trainer's `global_step` (plus `initial_version`). Sessions still running from the prefetch
continue on the new weights after the pause; they keep the version they were submitted at,
the older one, so their staleness is never understated.

TRL's GRPOTrainer uses the returned `logprobs` for its importance-sampling correction only
when it drives vLLM itself (`use_vllm`); with a rollout function on its own it treats the
batch as sampled by the current policy. Keep `max_staleness` at 0 for strictly on-policy
batches (no prefetch reuse) or 1 (the prefetched batch, one step behind).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from polar.advantages import trace_advantages
from polar.client.sdk import PolarClient, TaskRun
from polar.contracts import SessionResult, TaskResult
from polar.records import Trace
from polar.settings import Settings, get_settings
from polar.tasks.spec import TaskSpec
from polar.trainers._sessions import (
    absent_reason,
    chains,
    last_user_text,
    left_out,
    task_with,
    trainable,
)
from polar.trainers.weights import InPlaceReload, write_safetensors

log = logging.getLogger("polar.trainers.trl")
T = TypeVar("T")


def prompt_text(prompt: Any) -> str:
    """The instruction a TRL prompt carries: the text itself, or the last user message's text
    of a conversational prompt."""
    text = last_user_text(prompt)
    if text is None:
        raise ValueError(f"a TRL prompt must be text or a chat with a user message: {prompt!r}")
    return text


def polar_reward(
    completions: Sequence[Any], polar_reward: Sequence[float | None] | None = None, **_: Any
) -> list[float | None]:
    """TRL reward function: Polar's session reward of each row (None: unscored, which TRL
    leaves out of the group baseline)."""
    if polar_reward is None:
        raise ValueError("polar_reward reads the `polar_reward` field: use PolarRolloutFunc")
    if len(polar_reward) != len(completions):
        raise ValueError(f"{len(polar_reward)} Polar rewards for {len(completions)} completions")
    return [None if r is None else float(r) for r in polar_reward]


@dataclass
class Prefetched:
    """A task submitted ahead for a prompt, with the version it was submitted at."""

    key: str
    run: TaskRun
    version: int
    submitted: float


@dataclass
class GroupRun:
    """One group's finished task: its workflow, result, and each session with its traces."""

    workflow_id: str
    result: TaskResult
    sessions: list[tuple[SessionResult, list[Trace]]] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    """Why a session does not train (`_sessions.left_out`: its own state, or its group
    dropped by the task's `infra_errors.group` rule), by session id."""


@dataclass
class RolloutStats:
    """What the rollout function did, cumulated (and per call in `per_call`)."""

    calls: int = 0
    tasks: int = 0
    sessions: int = 0
    rows_trained: int = 0
    unscored_rows: int = 0
    unscored_reasons: Counter[str] = field(default_factory=Counter)
    chains_left_out: int = 0
    tokens_left_out: int = 0
    prefetch_used: int = 0
    prefetch_dropped: int = 0
    prefetch_dropped_reasons: Counter[str] = field(default_factory=Counter)
    syncs: int = 0
    wait_s: float = 0.0
    sync_s: float = 0.0
    per_call: list[dict[str, Any]] = field(default_factory=list)


class _LoopThread:
    """An asyncio loop on a thread of its own: Polar's client lives there, so tasks are
    followed while the (synchronous) trainer computes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="polar-trl", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class PolarRolloutFunc:
    """`GRPOTrainer(rollout_func=...)`: Polar sessions as TRL rows (see the module docstring).

    `task`: the TaskSpec template (its instruction is replaced by each prompt's text).
    `weights`: how new weights reach the servers after each optimizer step (None: not synced,
    for a frozen policy or a caller that syncs itself). `max_staleness`: how many policy
    versions a prefetched task may lag. `timeout_s`: per task."""

    def __init__(
        self,
        task: TaskSpec | dict[str, Any],
        *,
        settings: Settings | None = None,
        weights: InPlaceReload | None = None,
        max_staleness: int = 1,
        prefetch: Literal["repeat"] | Callable[[list[Any]], list[Any]] | bool = "repeat",
        initial_version: int = 0,
        timeout_s: float = 1800.0,
    ) -> None:
        if max_staleness < 0:
            raise ValueError("max_staleness must be >= 0")
        self.template = task if isinstance(task, TaskSpec) else TaskSpec.model_validate(task)
        self.settings = settings or get_settings()
        self.weights = weights
        self.max_staleness = max_staleness
        self.prefetch = prefetch
        self.initial_version = initial_version
        self.timeout_s = timeout_s
        self.version = initial_version
        self.stats = RolloutStats()
        self.pending: list[Prefetched] = []
        self._synced_step = 0
        self._loop: _LoopThread | None = None
        self._polar: PolarClient | None = None
        self._warned_tied = False

    # ------------------------------------------------------------------ TRL's hook
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        called = time.monotonic()
        mode = "train" if trainer.model.training else "eval"
        size = int(trainer.num_generations if mode == "train" else trainer.num_generations_eval)
        groups = self.groups(prompts, size)
        self._sync_if_stepped(trainer)
        started = time.monotonic()
        loop = self._ensure_loop()
        results = loop.run(self._collect(groups, size))
        waited = time.monotonic() - started
        self.stats.wait_s += waited
        rows = self.rows(results, trainer)
        self._prefetch(groups, size)
        self._log(trainer, mode, rows, waited, called)
        return rows

    # ------------------------------------------------------------------ pieces
    @staticmethod
    def groups(prompts: Sequence[Any], size: int) -> list[Any]:
        """The distinct prompt of each run of `size` equal prompts (TRL's RepeatSampler)."""
        if size < 1 or len(prompts) % size:
            raise ValueError(f"{len(prompts)} prompts do not split into groups of {size}")
        out = []
        for start in range(0, len(prompts), size):
            block = prompts[start : start + size]
            if any(p != block[0] for p in block[1:]):
                raise ValueError(
                    f"prompts {start}..{start + size - 1} differ: TRL repeats each prompt "
                    f"num_generations ({size}) times in a row"
                )
            out.append(block[0])
        return out

    def task_for(self, prompt: Any, size: int) -> TaskSpec:
        """One group's task: the template, the prompt's text, `size` sessions, this version."""
        return task_with(
            self.template,
            instruction=prompt_text(prompt),
            num_sessions=size,
            policy_version=self.version,
        )

    def _ensure_loop(self) -> _LoopThread:
        if self._loop is None:
            self._loop = _LoopThread()
        return self._loop

    async def _client(self) -> PolarClient:
        if self._polar is None:
            self._polar = await PolarClient.connect(self.settings)
        return self._polar

    async def _collect(self, groups: list[Any], size: int) -> list[GroupRun]:
        """Each group's task (a prefetched one where it fits, else submitted now), awaited
        together, with the traces of its trainable sessions."""
        polar = await self._client()
        runs: list[TaskRun] = []
        for prompt in groups:
            key = prompt_text(prompt)
            taken = self._take_prefetched(key)
            if taken is None:
                runs.append(await polar.submit(self.task_for(prompt, size)))
                self.stats.tasks += 1
            else:
                runs.append(taken.run)
                self.stats.prefetch_used += 1
        await self._drop_unused(polar)
        finished = await asyncio.gather(
            *(polar.wait(run, timeout_s=self.timeout_s) for run in runs)
        )
        out = []
        rule = self.template.infra_errors.group
        for run, result in zip(runs, finished, strict=True):
            group = GroupRun(run.workflow_id, result)
            why = left_out(result.sessions, rule)
            group.left_out = {sid: reason for sid, reason in why.items() if reason is not None}
            for session in sorted(result.sessions, key=lambda s: s.index):
                if why[session.session_id] is None:
                    traces = await asyncio.to_thread(polar.load_traces, session)
                else:
                    traces = []
                group.sessions.append((session, traces))
            out.append(group)
        return out

    def _take_prefetched(self, key: str) -> Prefetched | None:
        for i, item in enumerate(self.pending):
            if item.key == key and self.version - item.version <= self.max_staleness:
                return self.pending.pop(i)
        return None

    async def _drop_unused(self, polar: PolarClient) -> None:
        """Cancel prefetched tasks this call did not take: past `max_staleness`, or for a
        prompt that did not come."""
        for item in self.pending:
            stale = self.version - item.version > self.max_staleness
            reason = "stale" if stale else "prompt not asked"
            self.stats.prefetch_dropped += 1
            self.stats.prefetch_dropped_reasons[reason] += 1
            log.info("cancelling prefetched task %s (%s)", item.run.workflow_id, reason)
            try:
                await polar.cancel(item.run)
            except Exception as exc:  # already closed: nothing to stop
                log.debug("cancel %s: %s", item.run.workflow_id, exc)
        self.pending = []

    def rows(self, groups: list[GroupRun], trainer: Any) -> dict[str, list[Any]]:
        """TRL's rows, one per session, in group then session order."""
        rows: dict[str, list[Any]] = defaultdict(list)
        filler_prompt: list[int] | None = None
        for group in groups:
            self.stats.sessions += len(group.sessions)
            for session, traces in group.sessions:
                if trainable(session) and traces:
                    ordered = chains(traces)
                    chain, rest = ordered[0], ordered[1:]
                    filler_prompt = filler_prompt or list(chain.prompt_ids)
                    version = chain.provenance.policy_version
                    self._add(
                        rows,
                        prompt_ids=list(chain.prompt_ids),
                        completion_ids=list(chain.response_ids),
                        logprobs=list(chain.response_logprobs),
                        env_mask=list(chain.loss_mask),
                        polar_reward=session.reward,
                        polar_policy_version=version,
                        polar_staleness=None if version is None else self.version - version,
                        polar_session_id=session.session_id,
                        polar_trace_id=chain.trace_id,
                        polar_workflow_id=group.workflow_id,
                        polar_status=session.status.value,
                        polar_chains=len(ordered),
                        polar_left_out_tokens=sum(sum(t.loss_mask) for t in rest),
                    )
                    self.stats.rows_trained += 1
                    self.stats.chains_left_out += len(rest)
                    self.stats.tokens_left_out += sum(sum(t.loss_mask) for t in rest)
                else:
                    reason = group.left_out.get(session.session_id) or (
                        absent_reason(session) if not trainable(session) else "no traces"
                    )
                    self.stats.unscored_rows += 1
                    self.stats.unscored_reasons[reason] += 1
                    self._add(rows, **self._filler(trainer, session, group, filler_prompt))
        return dict(rows)

    def _filler(
        self, trainer: Any, session: SessionResult, group: GroupRun, prompt: list[int] | None
    ) -> dict[str, Any]:
        """The row of a session that is not trained on: one end-of-turn token, mask 0."""
        tokenizer: Any = getattr(trainer, "processing_class", None)
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer
        if tokenizer is None or tokenizer.eos_token_id is None:
            raise ValueError("the trainer's processing class has no eos token id")
        eos = int(tokenizer.eos_token_id)
        if prompt is None:
            prompt = [eos]
        return {
            "prompt_ids": list(prompt),
            "completion_ids": [eos],
            "logprobs": [0.0],
            "env_mask": [0],
            "polar_reward": None,
            "polar_policy_version": group.result.policy_version,
            "polar_staleness": None,
            "polar_session_id": session.session_id,
            "polar_trace_id": None,
            "polar_workflow_id": group.workflow_id,
            "polar_status": session.status.value,
            "polar_chains": 0,
            "polar_left_out_tokens": 0,
        }

    @staticmethod
    def _add(rows: dict[str, list[Any]], **values: Any) -> None:
        for key, value in values.items():
            rows[key].append(value)

    def _prefetch(self, groups: list[Any], size: int) -> None:
        """Submit the next call's tasks now, so they sample while the trainer steps."""
        if self.prefetch is False:
            return
        upcoming = groups if self.prefetch in ("repeat", True) else self.prefetch(groups)  # type: ignore[operator]
        specs = [(prompt_text(p), self.task_for(p, size)) for p in upcoming]

        async def submit() -> list[Prefetched]:
            polar = await self._client()
            now = time.monotonic()
            return [
                Prefetched(key, await polar.submit(spec), self.version, now) for key, spec in specs
            ]

        self.pending += self._ensure_loop().run(submit())
        self.stats.tasks += len(specs)

    def _sync_if_stepped(self, trainer: Any) -> None:
        """After an optimizer step: the trainer's weights into the servers, version bumped."""
        step = int(trainer.state.global_step)
        if step == self._synced_step:
            return
        if self.weights is not None:
            model = trainer.accelerator.unwrap_model(trainer.model)
            if getattr(model.config, "tie_word_embeddings", False) and not self._warned_tied:
                log.warning("tied embeddings: vLLM's in-place reload keeps the old output head")
                self._warned_tied = True
            started = time.monotonic()
            self.weights.sync(lambda path: _save(model, path))
            self.stats.sync_s += time.monotonic() - started
            self.stats.syncs += 1
        self._synced_step = step
        self.version = self.initial_version + step

    def _log(
        self, trainer: Any, mode: str, rows: dict[str, list[Any]], waited: float, called: float
    ) -> None:
        """Polar's figures into TRL's own metric sink (logged with its step metrics)."""
        self.stats.calls += 1
        staleness = [s for s in rows["polar_staleness"] if s is not None]
        rewards = [r for r in rows["polar_reward"] if r is not None]
        call = {
            "version": self.version,
            "rows": len(rows["polar_reward"]),
            "unscored": sum(r is None for r in rows["polar_reward"]),
            "mean_reward": statistics.fmean(rewards) if rewards else None,
            "reward_std": statistics.pstdev(rewards) if rewards else None,
            "staleness_max": max(staleness) if staleness else None,
            "wait_s": round(waited, 3),
            "called_at": called,
        }
        self.stats.per_call.append(call)
        metrics = getattr(trainer, "_metrics", None)
        if metrics is None:
            return
        sink = metrics[mode]
        sink["polar/wait_s"].append(waited)
        sink["polar/unscored_rows"].append(float(sum(r is None for r in rows["polar_reward"])))
        sink["polar/policy_version"].append(float(self.version))
        if staleness:
            sink["polar/staleness_mean"].append(statistics.fmean(staleness))
        sink["polar/prefetch_dropped_total"].append(float(self.stats.prefetch_dropped))
        sink["polar/chains_left_out_total"].append(float(self.stats.chains_left_out))

    def close(self) -> None:
        """Cancel the prefetched tasks and stop the client's loop."""
        if self._loop is None:
            return
        loop, self._loop = self._loop, None
        polar = self._polar
        if polar is not None and self.pending:
            pending, self.pending = self.pending, []

            async def cancel() -> None:
                for item in pending:
                    try:
                        await polar.cancel(item.run)
                    except Exception as exc:
                        log.debug("cancel %s: %s", item.run.workflow_id, exc)

            loop.run(cancel(), timeout_s=60)
        loop.close()

    def __enter__(self) -> PolarRolloutFunc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _save(model: Any, path: Path) -> None:
    model.save_pretrained(path, safe_serialization=True)


# ====================================================================== AsyncGRPOTrainer
# (trl.experimental.async_grpo: RolloutWorkerProtocol, RolloutSample, WeightTransferProtocol)

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
    """sessions not trained on, by reason (`status error`, `no reward`, `status cancelled`:
    stragglers cancelled by the early stop)."""


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
    (an infrastructure failure or a cancelled straggler is never a zero-reward sample); groups
    with no reward spread or fewer than two graded sessions (`filter_zero_spread`); groups
    more than `max_staleness` versions behind (`stale="drop"`), or kept with their advantage
    scaled by `stale_weight` per version past the bound (`stale="downweight"`: then give TRL's
    own `max_staleness` room for them)."""

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
        self.timeout_s = timeout_s
        self.rollout_buffer: queue.Queue[Any] = queue.Queue(maxsize=queue_maxsize)
        self.metrics_queue: queue.Queue[dict[str, float | tuple[float, float]]] = queue.Queue(
            maxsize=4096
        )
        self.model_version = 0
        self.counts = WorkerCounts()
        self._loop: _LoopThread | None = None
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
        self._loop = _LoopThread()
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
        """Raise when the producer failed, or has handed nothing over for `stale_after_s`."""
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
        rewards: dict[str, float | None] = {}
        traces: list[Trace] = []
        for session in result.sessions:
            if not trainable(session):
                self.counts.left_out_sessions[absent_reason(session)] += 1
                continue
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


class PolarWeightTransfer:
    """`AsyncGRPOTrainer(weight_transfer=...)`: TRL streams `(name, tensor)` pairs; they are
    written over the served checkpoint and vLLM reloads it in place, between the gateway's
    pause and resume (`InPlaceReload`). The trainer then calls the worker's
    `update_model_version`, which tags Polar's next tasks."""

    def __init__(self, reload: InPlaceReload) -> None:
        self.reload = reload
        self.sent = 0

    def init_weight_transfer(self) -> None:
        """Check the served model directory is there to write into."""
        if not (self.reload.policy_dir / "config.json").exists():
            raise FileNotFoundError(f"no served model at {self.reload.policy_dir}")

    def pause(self) -> None:
        self.reload.pause()

    def send_weights(self, iterator: Iterator[tuple[str, Any]]) -> None:
        """Write the tensors over the checkpoint, then vLLM reloads it (the gateway is paused)."""
        self.sent += write_safetensors(self.reload.policy_dir, iterator)
        self.reload.reload()
        self.reload.syncs += 1

    def resume(self) -> None:
        self.reload.resume()

    def destroy(self) -> None:
        return None

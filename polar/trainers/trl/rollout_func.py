"""TRL 1.16's `GRPOTrainer`: Polar as its rollout function (`PolarRolloutFunc`, `polar_reward`).

    from trl import GRPOConfig, GRPOTrainer
    from polar.trainers.trl import PolarRolloutFunc, polar_reward

    weights = InPlaceReload.from_settings(settings, policy_dir)  # never the served folder
    rollout = PolarRolloutFunc(task, settings=settings, weights=weights)
    trainer = GRPOTrainer(model=served_dir, reward_funcs=polar_reward, args=GRPOConfig(...),
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
  `polar_workflow_id`, `polar_status`, `polar_outcome` (the session's outcome label:
  `ok`, `policy_failure`, `task_error`, `infra_error:storage`, ...; None while cancelled) and
  `polar_left_out` (None for a trained row; else why not, with its detail).
* A session that is not trainable (no reward, an `error` or `cancelled` status, a `task_error`
  or `infra_error` outcome: not a verdict on the policy) becomes a row with one end-of-turn
  token, mask 0 and reward None: TRL leaves a None reward out of the group baseline and gives
  it advantage 0, so it is neither trained on nor a zero-reward sample.
* A batch in which no session was scored (or fewer than the share `min_scored`) raises
  `UnscoredBatch` (polar/trainers/_sessions.py) out of TRL's `train()`, naming the counts and
  each outcome label with an example detail: such a batch would train on nothing.

Advantages and the loss are TRL's own; rewards are Polar's.

Ahead of time: after returning a batch, the function submits the next batch's tasks (by
default the same prompts again, `prefetch="repeat"`, which is right for datasets that repeat a
task family; `prefetch=False` turns it off), so those sessions run while TRL computes the loss
and steps. At the next call, a prefetched task is used when its prompt matches and it is at
most `max_staleness` versions behind; unmatched or older ones are cancelled and counted.

Weights: at each call after an optimizer step (TRL's own `use_vllm` path does the same), the
trainer's model is saved into `weights.policy_dir` (an `InPlaceReload`: a folder of the
trainer's own, never the one vLLM was started from) and `weights` pauses the gateway, reloads
vLLM in place from it and resumes. The policy version counts weight versions only: it starts
at `initial_version` and goes up by one at each sync, never at an optimizer step alone. With
`weights=None` (a frozen policy, or a caller that syncs the weights itself) it stays where it
is: a caller that syncs itself sets `rollout.version` to the version it served after each of
its syncs. Sessions still running from the prefetch continue on the new weights after the
pause; they keep the version they were submitted at, the older one, so their staleness is
never understated.

TRL's GRPOTrainer uses the returned `logprobs` for its importance-sampling correction only
when it drives vLLM itself (`use_vllm`); with a rollout function on its own it treats the
batch as sampled by the current policy. Keep `max_staleness` at 0 for strictly on-policy
batches (no prefetch reuse) or 1 (the prefetched batch, one step behind).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from polar.client.sdk import PolarClient, TaskRun
from polar.contracts import SessionResult
from polar.records import Trace
from polar.settings import Settings, get_settings
from polar.tasks.spec import TaskSpec
from polar.trainers._sessions import (
    Unscored,
    absent_reason,
    chains,
    check_min_scored,
    last_user_text,
    left_out,
    require_scored,
    task_with,
    trainable,
    unscored,
)
from polar.trainers.trl.loop_thread import LoopThread
from polar.trainers.trl.rollout_state import GroupRun, Prefetched, RolloutStats
from polar.trainers.weights import InPlaceReload

log = logging.getLogger("polar.trainers.trl")


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


class PolarRolloutFunc:
    """`GRPOTrainer(rollout_func=...)`: Polar sessions as TRL rows (see the module docstring).

    `task`: the TaskSpec template (its instruction is replaced by each prompt's text).
    `weights`: how new weights reach the servers after each optimizer step (None: not synced,
    for a frozen policy or a caller that syncs itself and sets `version`). `max_staleness`:
    how many policy versions a prefetched task may lag. `min_scored`: the share of a batch's
    sessions that must be scored, else `UnscoredBatch` (0.0: raise only when none was; None:
    never). `timeout_s`: per task."""

    def __init__(
        self,
        task: TaskSpec | dict[str, Any],
        *,
        settings: Settings | None = None,
        weights: InPlaceReload | None = None,
        max_staleness: int = 1,
        prefetch: Literal["repeat"] | Callable[[list[Any]], list[Any]] | bool = "repeat",
        initial_version: int = 0,
        min_scored: float | None = 0.0,
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
        self.min_scored = check_min_scored(min_scored)
        self.timeout_s = timeout_s
        self.version = initial_version
        self.stats = RolloutStats()
        self.pending: list[Prefetched] = []
        self._synced_step = 0
        self._loop: LoopThread | None = None
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
        self._log(trainer, mode, rows, waited, called)
        self.check_scored(results)
        self._prefetch(groups, size)
        return rows

    def check_scored(self, groups: list[GroupRun]) -> None:
        """Raise `UnscoredBatch` where fewer of the batch's sessions were scored than
        `min_scored` asks (by default: none)."""
        require_scored(
            self.reasons(groups),
            self.min_scored,
            what=f"TRL rollout call {self.stats.calls}",
            note="Such a batch trains on nothing; PolarRolloutFunc(min_scored=None) allows it",
        )

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

    def _ensure_loop(self) -> LoopThread:
        if self._loop is None:
            self._loop = LoopThread()
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

    @staticmethod
    def left_out_of(
        group: GroupRun, session: SessionResult, traces: list[Trace]
    ) -> Unscored | None:
        """Why a session of `group` gives no trained row (None: it gives one)."""
        if trainable(session) and traces:
            return None
        reason = group.left_out.get(session.session_id) or (
            absent_reason(session) if not trainable(session) else "no traces"
        )
        return unscored(session, reason)

    def reasons(self, groups: list[GroupRun]) -> list[Unscored | None]:
        """Each session's `left_out_of`, in row order."""
        return [self.left_out_of(g, s, traces) for g in groups for s, traces in g.sessions]

    def rows(self, groups: list[GroupRun], trainer: Any) -> dict[str, list[Any]]:
        """TRL's rows, one per session, in group then session order."""
        rows: dict[str, list[Any]] = defaultdict(list)
        filler_prompt: list[int] | None = None
        for group in groups:
            self.stats.sessions += len(group.sessions)
            for session, traces in group.sessions:
                why = self.left_out_of(group, session, traces)
                if why is None:
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
                        polar_outcome=session.outcome.label if session.outcome else None,
                        polar_left_out=None,
                    )
                    self.stats.rows_trained += 1
                    self.stats.chains_left_out += len(rest)
                    self.stats.tokens_left_out += sum(sum(t.loss_mask) for t in rest)
                else:
                    self.stats.unscored_rows += 1
                    self.stats.unscored_reasons[why.label] += 1
                    filler = self._filler(trainer, session, group, filler_prompt)
                    self._add(rows, **filler, polar_left_out=str(why))
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
            "polar_outcome": session.outcome.label if session.outcome else None,
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
        """After an optimizer step: the trainer's weights into the servers and the version one
        up; without `weights`, nothing (the version counts weight versions only)."""
        step = int(trainer.state.global_step)
        if step == self._synced_step:
            return
        self._synced_step = step
        if self.weights is None:
            return
        model = trainer.accelerator.unwrap_model(trainer.model)
        if getattr(model.config, "tie_word_embeddings", False) and not self._warned_tied:
            log.warning("tied embeddings: vLLM's in-place reload keeps the old output head")
            self._warned_tied = True
        started = time.monotonic()
        self.weights.sync(lambda path: _save(model, path))
        self.stats.sync_s += time.monotonic() - started
        self.stats.syncs += 1
        self.version += 1

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

"""slime: Polar as a rollout function (`--rollout-function-path` names `generate_rollout`).

slime calls `generate_rollout(args, rollout_id, data_source, evaluation=False)` (its
`slime.rollout.base_types.call_rollout_fn`, THUDM/slime 624b824a). This one takes the rollout
batch from slime's own data source (`data_source.get_samples(args.rollout_batch_size)`: one group
of `n_samples_per_prompt` `Sample`s per prompt, with slime's `group_index` and `index`), submits
one Polar task per group (`num_sessions` = the group's size; a Polar task is one GRPO group: one
instruction, N sessions) all at once, and fills the group's `Sample`s from the sessions' traces
as Polar stored them, never retokenised:

| `Sample` field | from Polar |
|---|---|
| `tokens` | the trace's `prompt_ids + response_ids` |
| `response_length`, `loss_mask` | `len(response_ids)`, the trace's `loss_mask` (response part) |
| `rollout_log_probs` | the trace's `response_logprobs` (0.0 where the mask is 0) |
| `reward` | the trace's reward (the session's, under `broadcast`) |
| `status` | `completed`; `failed` for a harness that failed or timed out but was graded |
| `weight_versions` | `[str(policy_version)]`, the version Polar stamped on the session |
| `group_index`, `index`, `prompt`, `label` | slime's own (from its data source) |
| `rollout_id` | slime's, else the sample's `index`: one per session |
| `session_id` | Polar's session id |
| `metadata["polar"]` | provenance, workflow id, traces key, chain count, rerun count |

Multi-trace sessions: a session whose prefix chain broke gives one `Sample` per chain, all with
the session's `rollout_id` (slime's "compact rollout" shape, `list[list[list[Sample]]]`: prompt ×
session × chains, checked by slime's `validate_rollout_id_annotated`), so slime's loss counts the
session once. The output always has that shape; slime flattens it.

slime's default GRPO reward normalisation reshapes the batch into groups only when it holds
exactly `rollout_batch_size × n_samples_per_prompt` samples; with extra chains it normalises over
the whole batch. `post_process_rewards` (`--custom-reward-post-process-path
polar.trainers.slime.post_process_rewards`) normalises per prompt group with each session counted
once (its chains share its normalised reward), and equals slime's default where every session has
one chain.

Sessions that cannot train (no reward, `error`/`cancelled`/infra statuses) never become
zero-reward samples, and slime's batch cannot leave a sample out: a group's missing sessions
are run again as one more task, up to `polar_max_attempts` tasks per group, and then the
rollout raises `UnscoredBatch` (polar/trainers/_sessions.py) naming the counts and each
outcome label with an example detail. It raises at once, without rerunning, where the first
tasks scored fewer than the share `polar_min_scored` of the batch's samples (by default:
none), or where a session ended `task_error` (the task itself cannot run: a rerun would end
the same).

Settings come from slime's args, which `--custom-config-path polar.yaml` fills:

    polar_task: /path/to/task.json   # a TaskSpec template (dict, JSON text or file)
    polar_policy_version: null       # null: the rollout id (slime updates weights once per rollout)
    polar_max_attempts: 2            # tasks tried per group before the rollout fails
    polar_min_scored: 0.0            # share of the first tasks' sessions that must be scored
                                     # (0.0: fail at once when none was; null: always rerun)
    polar_timeout_s: 1800            # per task

A row's `metadata["polar_task"]` (slime's `--metadata-key` column) goes over the template; with
no instruction set, the instruction is the prompt's last user message (or the prompt text).
The Polar stack is named by the `POLAR_*` environment of slime's rollout manager.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import statistics
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from polar.client.sdk import PolarClient
from polar.records import Trace
from polar.settings import ClientSettings, get_settings
from polar.tasks.spec import TaskSpec
from polar.trainers._sessions import (
    SessionRun,
    Unscored,
    chains,
    check_min_scored,
    load_template,
    require_scored,
    row_task,
    run_task,
    task_with,
)
from polar.trainers.slime_layout import SLIME_STATUS, slime_row

log = logging.getLogger("polar.trainers.slime")

Group = list[Any]
"""One prompt's `Sample`s from slime's data source (slime's own class)."""


@dataclass
class RolloutConfig:
    """The `polar_*` settings of slime's args (see the module docstring)."""

    task: dict[str, Any] | None = None
    policy_version: int | None = None
    max_attempts: int = 2
    min_scored: float | None = 0.0
    timeout_s: float = 1800.0

    @classmethod
    def from_args(cls, args: Any) -> RolloutConfig:
        version = getattr(args, "polar_policy_version", None)
        return cls(
            task=load_template(getattr(args, "polar_task", None)),
            policy_version=None if version is None else int(version),
            max_attempts=max(1, int(getattr(args, "polar_max_attempts", 2) or 2)),
            min_scored=check_min_scored(getattr(args, "polar_min_scored", 0.0)),
            timeout_s=float(getattr(args, "polar_timeout_s", 1800.0) or 1800.0),
        )


@dataclass
class RolloutStats:
    """What one rollout did, for slime's rollout metrics."""

    sessions: int = 0
    reruns: int = 0
    samples: int = 0
    chains_beyond_first: int = 0
    rewards: list[float] = field(default_factory=list)
    run_s: list[float] = field(default_factory=list)
    evaluate_s: list[float] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        def mean(values: list[float]) -> float:
            return sum(values) / len(values) if values else 0.0

        return {
            "polar/sessions": float(self.sessions),
            "polar/reruns": float(self.reruns),
            "polar/samples": float(self.samples),
            "polar/extra_chains": float(self.chains_beyond_first),
            "polar/reward_mean": mean(self.rewards),
            "polar/run_s_mean": mean(self.run_s),
            "polar/evaluate_s_mean": mean(self.evaluate_s),
        }


def response_text(trace: Trace) -> str:
    """The response's text where one model call made the trace, else "" (slime logs it only)."""
    if len(trace.provenance.record_ids) != 1 or trace.response_message is None:
        return ""
    content = trace.response_message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def fill(sample: Any, trace: Trace, run: SessionRun, *, rollout_id: int, rerun: int) -> Any:
    """`sample` (slime's `Sample`) with the trace's tokens, mask, logprobs, reward, version,
    status and provenance; slime's own `group_index`, `index`, `prompt` and `label` are kept."""
    row = slime_row(
        trace,
        index=sample.index,
        group_index=sample.group_index,
        rollout_id=rollout_id,
        response_text=response_text(trace),
    )
    for name in (
        "tokens",
        "response",
        "response_length",
        "reward",
        "loss_mask",
        "weight_versions",
        "rollout_log_probs",
        "rollout_id",
        "session_id",
    ):
        setattr(sample, name, row[name])
    sample.status = type(sample).Status(SLIME_STATUS[run.session.status])
    sample.remove_sample = False
    ordered = chains(run.traces)
    sample.metadata = {
        **(sample.metadata or {}),
        "polar": {
            **row["metadata"],
            "workflow_id": run.workflow_id,
            "traces_key": run.session.traces_key,
            "session_reward": run.session.reward,
            "chains": len(ordered),
            "rerun": rerun,
        },
    }
    return sample


def session_samples(base: Any, run: SessionRun, rerun: int = 0) -> list[Any]:
    """One slime `Sample` per chain of a trainable session (the root chain fills `base`)."""
    ordered = chains(run.traces)
    if not ordered:
        raise ValueError(f"session {run.session.session_id} has no traces")
    rollout_id = base.rollout_id if base.rollout_id is not None else base.index
    samples = [base] + [copy.deepcopy(base) for _ in ordered[1:]]
    return [
        fill(sample, trace, run, rollout_id=rollout_id, rerun=rerun)
        for sample, trace in zip(samples, ordered, strict=True)
    ]


def group_task(config: RolloutConfig, group: Group, version: int | None) -> TaskSpec:
    """The Polar task of one prompt group: its sessions, stamped with `version`."""
    first = group[0]
    spec = row_task(
        config.task,
        (first.metadata or {}).get("polar_task"),
        first.prompt,
        where="`polar_task` in slime's --custom-config-path YAML or a row's metadata",
    )
    return task_with(spec, num_sessions=len(group), policy_version=version)


@dataclass
class GroupRollout:
    """One prompt group's samples so far: filled (`out`) or still to run (`pending`), and why
    each pending one's last session did not train."""

    group: Group
    out: dict[int, list[Any]] = field(default_factory=dict)
    pending: list[int] = field(default_factory=list)
    why: dict[int, Unscored] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pending = list(range(len(self.group)))

    def reasons(self) -> list[Unscored | None]:
        """Each sample's reason (None: filled), in the group's order."""
        return [None if i in self.out else self.why.get(i) for i in range(len(self.group))]


async def rollout_group(
    polar: PolarClient,
    config: RolloutConfig,
    state: GroupRollout,
    version: int | None,
    stats: RolloutStats,
    attempt: int,
) -> None:
    """One task of the group's pending samples' sessions; the trainable ones fill their
    samples (`[session][chain]` slime `Sample`s), the others stay pending, with their reason."""
    group = state.group
    spec = group_task(config, [group[i] for i in state.pending], version)
    runs = await run_task(polar, spec, timeout_s=config.timeout_s)
    stats.sessions += len(runs)
    still = []
    for i, run in zip(state.pending, runs, strict=True):
        why = run.unscored
        if why is not None:
            state.why[i] = why
            log.warning("polar session %s not trainable: %s", run.session.session_id, why)
            still.append(i)
            continue
        state.out[i] = session_samples(group[i], run, rerun=attempt)
        stats.reruns += attempt
        stats.samples += len(state.out[i])
        stats.chains_beyond_first += len(state.out[i]) - 1
        stats.rewards.append(float(run.session.reward or 0.0))
        stats.run_s.append(float(run.session.stage_seconds.get("run", 0.0)))
        stats.evaluate_s.append(float(run.session.stage_seconds.get("evaluate", 0.0)))
    state.pending = still


def check_rollout(states: Sequence[GroupRollout], config: RolloutConfig, attempt: int) -> None:
    """Raise `UnscoredBatch` where the rollout cannot end with every sample scored: after its
    first tasks scored fewer than `min_scored` of the samples, a `task_error` left a sample
    (a rerun would end the same), or the last task left one."""
    reasons = [r for state in states for r in state.reasons()]
    what = f"slime rollout (after {attempt + 1} of {config.max_attempts} tasks per group)"
    if attempt == 0:
        require_scored(
            reasons, config.min_scored, what=what, note="polar_min_scored sets the share"
        )
    hopeless = any(r is not None and r.label == "task_error" for r in reasons)
    if hopeless or attempt + 1 == config.max_attempts:
        require_scored(
            reasons,
            1.0,
            what=what,
            note="slime's batch cannot leave a sample out: every sample must be scored",
        )


async def rollout(
    groups: Sequence[Group], config: RolloutConfig, version: int | None
) -> tuple[list[list[list[Any]]], dict[str, float]]:
    """Every group's task at once (then its reruns); the filled samples (prompt × session ×
    chain) and metrics."""
    stats = RolloutStats()
    states = [GroupRollout(list(g)) for g in groups]
    async with await PolarClient.connect(get_settings(ClientSettings)) as polar:
        for attempt in range(config.max_attempts):
            live = [state for state in states if state.pending]
            if not live:
                break
            await asyncio.gather(
                *(rollout_group(polar, config, s, version, stats, attempt) for s in live)
            )
            check_rollout(states, config, attempt)
    data = [[state.out[i] for i in range(len(state.group))] for state in states]
    return data, stats.metrics()


NORMALISED = frozenset({"grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"})
"""slime's advantage estimators whose rewards it group-normalises (`_post_process_rewards`)."""
STD_NORMALISED = frozenset({"grpo", "gspo", "cispo"})


def post_process_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """slime's `--custom-reward-post-process-path` hook: (raw rewards, rewards), one per sample.

    As slime's default (`RolloutManager._post_process_rewards` at 624b824a): for the GRPO family
    with `rewards_normalization`, a reward minus its group's mean, divided by the group's
    (unbiased) std + 1e-6 where `grpo_std_normalization`; else the raw rewards. The group is the
    samples' `group_index`, and each session (`rollout_id`) counts once in its group's mean and
    std, whatever its chain count; its chains get its normalised reward."""
    key = getattr(args, "reward_key", None)
    raw = [float(s.reward[key] if key else s.reward) for s in samples]
    estimator = getattr(args, "advantage_estimator", None)
    if estimator not in NORMALISED or not getattr(args, "rewards_normalization", True):
        return raw, list(raw)
    sessions: dict[Any, dict[Any, float]] = {}
    for sample, reward in zip(samples, raw, strict=True):
        rollout = sample.rollout_id if sample.rollout_id is not None else sample.index
        sessions.setdefault(sample.group_index, {}).setdefault(rollout, reward)
    divide = estimator in STD_NORMALISED and getattr(args, "grpo_std_normalization", True)
    shift: dict[Any, tuple[float, float]] = {}
    for group, rewards in sessions.items():
        values = list(rewards.values())
        mean = sum(values) / len(values)
        std = statistics.stdev(values) if len(values) > 1 else float("nan")
        shift[group] = (mean, std + 1e-6 if divide else 1.0)
    out = []
    for sample, reward in zip(samples, raw, strict=True):
        mean, scale = shift[sample.group_index]
        out.append((reward - mean) / scale)
    return raw, out


def run_sync(coro: Any) -> Any:
    """Run `coro` to completion from synchronous code, on a thread of its own where this
    thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=target, name="polar-slime-rollout")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """slime's rollout function: `args.rollout_batch_size` prompt groups through Polar.

    Returns slime's `RolloutFnTrainOutput(samples, metrics)` (or the bare samples, which slime's
    `call_rollout_fn` accepts, where slime's module is not importable)."""
    if evaluation:
        raise ValueError(
            "polar.trainers.slime.generate_rollout is a training rollout; set slime's "
            "--eval-function-path to an evaluation function (e.g. "
            "slime.rollout.sglang_rollout.generate_rollout)"
        )
    config = RolloutConfig.from_args(args)
    version = rollout_id if config.policy_version is None else config.policy_version
    groups = data_source.get_samples(args.rollout_batch_size)
    data, metrics = run_sync(rollout(groups, config, version))
    try:
        from slime.rollout.base_types import RolloutFnTrainOutput
    except ImportError:
        return data
    return RolloutFnTrainOutput(samples=data, metrics=metrics)

"""A real (tiny, CPU) GRPO loop on Polar: submit, consume groups, update, sync, repeat.

Each step trains on `tasks_per_step` groups (one task each: `group_size`
sessions of a small multi-turn agent, `agent/agent.py`, talking to the policy
through the gateway). Groups are consumed as they finish (`iter_groups`);
groups whose policy version lags the trainer's by more than `max_policy_lag`
are dropped, counted in the step report, and replaced by fresh ones.
Advantages come from `polar.advantages` (sessions the evaluator did not score
are left out of the baseline and not trained on). The step is a clipped
policy-gradient update with `torch` over the traces' mask-1 tokens; the weights
are then synced into the serving vLLM (gateway paused → weights saved → vLLM
reloads them in place → prefix cache dropped → gateway resumed) and the policy
version is bumped. With `overlap`, the next step's tasks are submitted before
the update, so they sample while it runs (one version behind).

The task: "write a number using digits only"; the reward is the share of the
answer's non-space characters that are ASCII digits (every reply of every turn
counts). A random model writes about 1% digits. A model whose config ties its
embeddings to its output head (the suite's tiny model) is trained with the
embeddings frozen: vLLM's in-place reload does not refresh a tied head. For
learning, `untied_copy` gives the policy its own output head (`learn.py`).

Needs: `pip install -e '.[train]'` (CPU torch), and a stack whose vLLM has weight
reloading on and whose gateway has an admin token. The trainer starts from the
model vLLM serves (`POLAR_MODEL_DIR`) and writes its weights into `--policy-dir`,
a folder of its own, from which vLLM reloads them (never into the served folder:
that would overwrite the model):

    export POLAR_ADMIN_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(24))')
    POLAR_MODEL_DIR=$PWD/.polar/models/tiny-qwen3 POLAR_VLLM_WEIGHT_RELOAD=1 polar dev up
    .venv/bin/python examples/grpo/train.py --policy-dir /tmp/policy

(`examples/grpo/learn.py` starts such a stack itself and runs the learning benchmark.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from polar.advantages import trace_advantages
from polar.client.sdk import Group, PolarClient, TaskRun
from polar.records import Trace
from polar.settings import Settings, get_settings
from polar.tasks.spec import TaskSpec
from polar.trainers.weights import InPlaceReload

AGENT_DIR = Path(__file__).resolve().parent / "agent"
INSTRUCTION = "Write a number using digits only."

# reward = share of the answer's non-space characters that are ASCII digits (0 when empty)
# (a reward_command: it alone is told where the reward goes, and runs after the command)
DIGIT_SHARE_EVALUATOR = """python - <<'PY'
import json, os
answer = os.path.join(os.environ["POLAR_WORKSPACE"], "answer.txt")
text = open(answer).read() if os.path.isfile(answer) else ""
chars = [c for c in text if not c.isspace()]
share = sum(c in "0123456789" for c in chars) / len(chars) if chars else 0.0
json.dump({"reward": round(share, 6)}, open(os.environ["POLAR_REWARD_FILE"], "w"))
PY"""


@dataclass
class StepReport:
    step: int
    policy_version: int
    groups: int
    traces: int
    trained_tokens: int
    mean_reward: float | None
    """mean reward of the sessions trained on (scored ones only)."""
    reward_std: float | None
    loss: float
    max_logprob_gap: float | None
    """max |trainer logprob − sampler logprob| over the mask-1 tokens of the traces sampled
    at the current version, before the update (None when no trace was)."""
    stale_groups_dropped: int
    stale_traces_dropped: int
    """traces whose policy version lagged the trainer's by more than `max_policy_lag`."""
    unscored_sessions: int
    """sessions without a reward (error, cancelled): left out of the baseline, not trained."""
    failed_groups: int
    seconds: float


@dataclass
class Batch:
    """What one step trains on: (trace, advantage) pairs and the rewards behind them."""

    items: list[tuple[Trace, float]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    unscored_sessions: int = 0


def task_for(name: str, group_size: int, version: int, turns: int = 2) -> TaskSpec:
    """One GRPO group: `group_size` sessions of the agent, tagged with `version`."""
    return TaskSpec.model_validate(
        {
            "task_id": name,
            "instruction": INSTRUCTION,
            "num_sessions": group_size,
            "source": {"type": "dir", "path": str(AGENT_DIR)},
            "runtime": {"kind": "local"},
            "harness": {
                "kind": "command",
                "command": "python agent.py",
                "model": "policy",
                "env": {"GRPO_TURNS": str(turns)},
            },
            "builder": {"name": "per_request"},
            "evaluator": {
                "kind": "command",
                "command": "true",
                "reward_command": DIGIT_SHARE_EVALUATOR,
            },
            "timeouts": {"harness_s": 300, "heartbeat_s": 20},
            "metadata": {"policy_version": version, "example": "grpo"},
        }
    )


def split_by_lag(
    traces: Sequence[Trace], version: int, max_lag: int
) -> tuple[list[Trace], list[Trace]]:
    """(fresh, stale): stale traces were sampled more than `max_lag` versions before
    `version`; unversioned traces count as fresh."""
    fresh: list[Trace] = []
    stale: list[Trace] = []
    for trace in traces:
        sampled = trace.provenance.policy_version
        (stale if sampled is not None and version - sampled > max_lag else fresh).append(trace)
    return fresh, stale


def add_group(batch: Batch, group: Group, traces: Sequence[Trace]) -> None:
    """Add one group's traces with their GRPO advantages (`polar.advantages`)."""
    assert group.result is not None
    rewards = {s.session_id: s.reward for s in group.result.sessions}
    advantages = trace_advantages(traces, rewards)
    batch.rewards += [r for r in rewards.values() if r is not None]
    batch.unscored_sessions += sum(r is None for r in rewards.values())
    for trace in traces:
        advantage = advantages[trace.trace_id]
        if advantage is not None:  # an unscored session's traces are not trained on
            batch.items.append((trace, advantage))


def untied_copy(source: Path, target: Path) -> None:
    """Copy a model whose head is tied to its embeddings, giving it its own output head
    (initialised to the embeddings), so vLLM's in-place reload refreshes what training moves."""
    shutil.copytree(source, target)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    model.save_pretrained(target, safe_serialization=True)


class Policy:
    """The trainer's copy of the model: sampled-token logprobs and clipped PG steps."""

    def __init__(self, path: Path, lr: float = 1e-3, clip: float = 0.2) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        # a tied head is not refreshed by vLLM's in-place reload: keep it (and the
        # embeddings it shares) frozen then
        tied = bool(self.model.config.tie_word_embeddings)
        for name, param in self.model.named_parameters():
            param.requires_grad = not (tied and ("embed_tokens" in name or "lm_head" in name))
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(trainable, lr=lr)
        self.clip = clip

    def token_logprobs(self, trace: Trace) -> torch.Tensor:
        """Log-probabilities of `trace.response_ids` given everything before each of them."""
        ids = torch.tensor([trace.prompt_ids + trace.response_ids])
        logits = self.model(ids).logits[0, len(trace.prompt_ids) - 1 : -1]
        targets = torch.tensor(trace.response_ids)[:, None]
        return torch.log_softmax(logits, dim=-1).gather(1, targets)[:, 0]

    def step(
        self, batch: list[tuple[Trace, float]], version: int
    ) -> tuple[float, float | None, int]:
        """One clipped-surrogate step over mask-1 tokens: (loss, max logprob gap of the
        traces sampled at `version`, tokens)."""
        self.model.train()
        self.optimizer.zero_grad()
        total_tokens = sum(int(sum(t.loss_mask)) for t, _ in batch)
        loss_sum, gap = 0.0, None
        for trace, advantage in batch:
            mask = torch.tensor(trace.loss_mask, dtype=torch.float32)
            old = torch.tensor(trace.response_logprobs)
            new = self.token_logprobs(trace)
            if trace.provenance.policy_version == version and mask.any():
                here = float(((new.detach() - old).abs() * mask).max())
                gap = here if gap is None else max(gap, here)
            ratio = torch.exp(new - old)
            surrogate = torch.minimum(
                ratio * advantage, torch.clamp(ratio, 1 - self.clip, 1 + self.clip) * advantage
            )
            loss = -(surrogate * mask).sum() / max(total_tokens, 1)
            loss.backward()
            loss_sum += float(loss.detach())
        self.optimizer.step()
        return loss_sum, gap, total_tokens

    def save(self, path: Path) -> None:
        self.model.save_pretrained(path, safe_serialization=True)


async def sync_weights(
    policy: Policy, policy_dir: Path, *, admin_url: str, admin_token: str, vllm_url: str
) -> None:
    """Pause the gateway (drain in-flight calls), save the policy into `policy_dir`, reload
    vLLM's weights in place from there, resume (`polar.trainers.weights.InPlaceReload`, which
    refuses the folder vLLM serves)."""
    reload = InPlaceReload(
        policy_dir, vllm_urls=[vllm_url], admin_urls=[admin_url], admin_token=admin_token
    )
    await reload.sync_async(policy.save)


class Sampler:
    """The tasks in flight, each with the policy version it was submitted at."""

    def __init__(self, polar: PolarClient, group_size: int, turns: int) -> None:
        self.polar, self.group_size, self.turns = polar, group_size, turns
        self.in_flight: list[TaskRun] = []
        self.submitted = 0

    async def submit(self, count: int, version: int) -> None:
        for _ in range(count):
            name = f"grpo-v{version}-{self.submitted}"
            self.submitted += 1
            spec = task_for(name, self.group_size, version, self.turns)
            self.in_flight.append(await self.polar.submit(spec))

    async def collect(self, batch: Batch, report: StepReport, wanted: int, max_lag: int) -> None:
        """Take `wanted` fresh groups into `batch`, in finish order; stale groups are dropped
        (and counted), failed ones counted; either is replaced by a task at the current version."""
        version = report.policy_version
        while report.groups < wanted:
            short = wanted - report.groups - len(self.in_flight)
            if short > 0:
                await self.submit(short, version)
            if report.failed_groups > 3 * wanted:
                raise RuntimeError(f"{report.failed_groups} tasks failed in step {report.step}")
            groups = self.polar.iter_groups(
                list(self.in_flight), load_traces=True, include_failed=True
            )
            async with contextlib.aclosing(groups):
                async for group in groups:
                    self.in_flight.remove(group.run)
                    if group.result is None:
                        report.failed_groups += 1
                        break  # top up before waiting on the rest
                    fresh, stale = split_by_lag(group.traces, version, max_lag)
                    lagging = group.policy_version is not None and (
                        version - group.policy_version > max_lag
                    )
                    if stale or lagging:
                        report.stale_groups_dropped += 1
                        report.stale_traces_dropped += len(stale)
                        break  # its replacement is submitted before waiting on the rest
                    add_group(batch, group, fresh)
                    report.groups += 1
                    if report.groups == wanted:
                        break


async def train(
    polar: PolarClient,
    *,
    policy_dir: Path,
    model_dir: Path | None = None,
    vllm_url: str,
    admin_token: str,
    steps: int = 3,
    tasks_per_step: int = 2,
    group_size: int = 4,
    lr: float = 1e-3,
    max_policy_lag: int = 1,
    overlap: bool = False,
    turns: int = 2,
    on_step: Callable[[StepReport], None] | None = None,
) -> list[StepReport]:
    """Run `steps` GRPO steps; each trains on `tasks_per_step` fresh groups. The policy starts
    from `model_dir` (default: `policy_dir`'s checkpoint); each step's weights go into
    `policy_dir`, from which vLLM reloads them."""
    policy = Policy(model_dir or policy_dir, lr=lr)
    sampler = Sampler(polar, group_size, turns)
    reports: list[StepReport] = []
    for step in range(steps):
        version = step  # one update per step
        started = time.monotonic()
        report = StepReport(
            step=step,
            policy_version=version,
            groups=0,
            traces=0,
            trained_tokens=0,
            mean_reward=None,
            reward_std=None,
            loss=0.0,
            max_logprob_gap=None,
            stale_groups_dropped=0,
            stale_traces_dropped=0,
            unscored_sessions=0,
            failed_groups=0,
            seconds=0.0,
        )
        batch = Batch()
        await sampler.collect(batch, report, tasks_per_step, max_policy_lag)
        if overlap and step + 1 < steps:  # the next step's groups sample during this update
            await sampler.submit(tasks_per_step, version)
        if batch.items:
            report.loss, report.max_logprob_gap, report.trained_tokens = await asyncio.to_thread(
                policy.step, batch.items, version
            )
        await sync_weights(
            policy,
            policy_dir,
            admin_url=polar.settings.admin_base_url,
            admin_token=admin_token,
            vllm_url=vllm_url,
        )
        report.traces = len(batch.items)
        report.unscored_sessions = batch.unscored_sessions
        if batch.rewards:
            report.mean_reward = statistics.fmean(batch.rewards)
            report.reward_std = statistics.pstdev(batch.rewards)
        report.seconds = round(time.monotonic() - started, 3)
        reports.append(report)
        if on_step is not None:
            on_step(report)
    return reports


def report_line(report: StepReport) -> str:
    """One step report as a JSON line."""
    return json.dumps(asdict(report))


async def train_with_args(
    polar: PolarClient,
    settings: Settings,
    policy_dir: Path,
    args: argparse.Namespace,
    on_step: Callable[[StepReport], None] | None = None,
) -> list[StepReport]:
    """`train` with the loop options of a command line (steps, group sizes, lr, policy lag,
    overlap) against the stack `settings` names (its vLLM, the model it serves, the gateway's
    admin token); the weights go into `policy_dir`."""
    return await train(
        polar,
        policy_dir=policy_dir,
        model_dir=settings.model_dir,
        vllm_url=f"http://127.0.0.1:{settings.vllm_port}",
        admin_token=settings.admin_token or "",
        steps=args.steps,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        lr=args.lr,
        max_policy_lag=args.max_policy_lag,
        overlap=args.overlap,
        on_step=on_step,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--max-policy-lag",
        type=int,
        default=1,
        help="drop (and count) traces sampled more than this many versions ago",
    )
    parser.add_argument("--overlap", action="store_true", help="sample the next step meanwhile")
    args = parser.parse_args()
    if args.max_policy_lag < 0:
        parser.error("--max-policy-lag must be >= 0")
    settings: Settings = get_settings()
    if not settings.admin_token:
        raise SystemExit("set POLAR_ADMIN_TOKEN (the gateway's admin token)")

    async def go() -> None:
        polar = await PolarClient.connect(settings)
        await train_with_args(
            polar,
            settings,
            args.policy_dir,
            args,
            on_step=lambda report: print(report_line(report), flush=True),
        )

    asyncio.run(go())


if __name__ == "__main__":
    main()

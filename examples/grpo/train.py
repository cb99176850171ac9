"""A real (tiny, CPU) GRPO-style loop on Polar: submit, consume groups, update, sync, repeat.

Each step submits a few tasks (one GRPO group each: `group_size` sessions of
the demo agent), consumes the groups as they finish (`iter_groups`, dropping
traces older than the policy version allows), computes group-normalised
advantages from the sessions' rewards, takes a clipped policy-gradient step
on the model with `torch`, then syncs the weights into the serving vLLM
(gateway paused → weights saved → vLLM reloads them in place → gateway
resumed) and bumps the policy version.

The reward is toy but varied: the share of letters and spaces in the answer the
agent wrote (a random model writes mostly symbols). Embeddings stay frozen:
the tiny model ties its embeddings to its output head, which vLLM's in-place
reload does not refresh, so only the transformer blocks are trained.

Needs: `pip install -e '.[train]'` (CPU torch), and a stack whose vLLM serves a
writable copy of the model with weight reloading on and whose gateway has an
admin token:

    cp -r .polar/models/tiny-qwen3 /tmp/policy
    POLAR_MODEL_DIR=/tmp/policy POLAR_VLLM_WEIGHT_RELOAD=1 POLAR_ADMIN_TOKEN=secret polar dev up
    POLAR_ADMIN_TOKEN=secret .venv/bin/python examples/grpo/train.py --policy-dir /tmp/policy
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import torch
from transformers import AutoModelForCausalLM

from polar.models import SessionStatus, TaskSpec, Trace
from polar.sdk import PolarClient, TaskRun
from polar.settings import Settings, get_settings

DEMO = Path(__file__).resolve().parents[1] / "demo"

# reward = share of letters and spaces in answer.txt, written where the evaluator is told to
LETTER_SHARE_EVALUATOR = """python - <<'PY'
import json, os
text = open("answer.txt").read() if os.path.exists("answer.txt") else ""
share = sum(c.isalpha() or c == " " for c in text) / max(len(text), 1)
json.dump({"reward": round(share, 6)}, open(os.environ["POLAR_REWARD_FILE"], "w"))
PY"""


@dataclass
class StepReport:
    step: int
    policy_version: int
    groups: int
    stale_groups_dropped: int
    traces: int
    trained_tokens: int
    mean_reward: float
    loss: float
    max_logprob_gap: float
    """max |trainer logprob − sampler logprob| over the sampled tokens, before the update."""


def task_for(step: int, index: int, group_size: int, version: int) -> TaskSpec:
    spec = json.loads((DEMO / "task.json").read_text())
    spec.update(
        task_id=f"grpo-s{step}-t{index}",
        num_sessions=group_size,
        source={"type": "dir", "path": str(DEMO / "repo")},
        evaluator={"kind": "command", "command": LETTER_SHARE_EVALUATOR},
        metadata={"policy_version": version, "example": "grpo"},
    )
    spec["harness"]["env"] = {"DEMO_TURNS": "2", "DEMO_STREAM_TURNS": ""}
    return TaskSpec.model_validate(spec)


def group_advantages(rewards: list[float]) -> list[float]:
    """GRPO: each session's reward relative to its group, in group standard deviations."""
    if len(rewards) < 2:
        return [0.0 for _ in rewards]
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    return [(r - mean) / (std + 1e-6) for r in rewards]


class Policy:
    """The trainer's copy of the model: sampled-token logprobs and clipped PG steps."""

    def __init__(self, path: Path, lr: float = 1e-3, clip: float = 0.2) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        for name, param in self.model.named_parameters():
            param.requires_grad = "embed_tokens" not in name and "lm_head" not in name
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(trainable, lr=lr)
        self.clip = clip

    def token_logprobs(self, trace: Trace) -> torch.Tensor:
        """Log-probabilities of `trace.response_ids` given everything before each of them."""
        ids = torch.tensor([trace.prompt_ids + trace.response_ids])
        logits = self.model(ids).logits[0, len(trace.prompt_ids) - 1 : -1]
        targets = torch.tensor(trace.response_ids)[:, None]
        return torch.log_softmax(logits, dim=-1).gather(1, targets)[:, 0]

    def step(self, batch: list[tuple[Trace, float]]) -> tuple[float, float, int]:
        """One clipped-surrogate step over mask-1 tokens; (loss, max logprob gap, tokens)."""
        self.model.train()
        self.optimizer.zero_grad()
        total_tokens = sum(int(sum(t.loss_mask)) for t, _ in batch)
        loss_sum, gap = 0.0, 0.0
        for trace, advantage in batch:
            mask = torch.tensor(trace.loss_mask, dtype=torch.float32)
            old = torch.tensor(trace.response_logprobs)
            new = self.token_logprobs(trace)
            gap = max(gap, float(((new.detach() - old).abs() * mask).max()))
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
    """Pause the gateway (drain in-flight calls), reload vLLM's weights in place, resume."""
    headers = {"Authorization": f"Bearer {admin_token}"}
    async with httpx.AsyncClient(timeout=600) as http:
        (await http.post(f"{admin_url}/admin/pause", headers=headers)).raise_for_status()
        try:
            await asyncio.to_thread(policy.save, policy_dir)
            reload = await http.post(
                f"{vllm_url}/collective_rpc",
                json={"method": "reload_weights", "kwargs": {"weights_path": str(policy_dir)}},
            )
            reload.raise_for_status()
            # cached prompt KV was computed by the old weights: drop it
            (await http.post(f"{vllm_url}/reset_prefix_cache")).raise_for_status()
        finally:
            (await http.post(f"{admin_url}/admin/resume", headers=headers)).raise_for_status()


async def train(
    polar: PolarClient,
    *,
    policy_dir: Path,
    vllm_url: str,
    admin_token: str,
    steps: int = 3,
    tasks_per_step: int = 2,
    group_size: int = 4,
    lr: float = 1e-3,
    max_staleness: int = 0,
) -> list[StepReport]:
    """Run `steps` GRPO steps; each consumes the groups of `tasks_per_step` tasks."""
    policy = Policy(policy_dir, lr=lr)
    reports: list[StepReport] = []
    for step in range(steps):
        version = step  # one update per step

        def oldest_allowed(current: int = version) -> int:
            return current - max_staleness

        runs: list[TaskRun] = [
            await polar.submit(task_for(step, i, group_size, version))
            for i in range(tasks_per_step)
        ]
        batch: list[tuple[Trace, float]] = []
        rewards: list[float] = []
        groups = 0
        async for group in polar.iter_groups(
            runs, load_traces=True, min_policy_version=oldest_allowed
        ):
            assert group.result is not None
            groups += 1
            sessions = [s for s in group.result.sessions if s.status == SessionStatus.COMPLETED]
            session_rewards = [s.reward or 0.0 for s in sessions]
            rewards += session_rewards
            ids = [s.session_id for s in sessions]
            advantage = dict(zip(ids, group_advantages(session_rewards), strict=True))
            batch += [
                (t, advantage[t.provenance.session_id])
                for t in group.traces
                if t.provenance.session_id in advantage
            ]
        loss, gap, tokens = await asyncio.to_thread(policy.step, batch) if batch else (0.0, 0.0, 0)
        await sync_weights(
            policy,
            policy_dir,
            admin_url=polar.settings.admin_base_url,
            admin_token=admin_token,
            vllm_url=vllm_url,
        )
        reports.append(
            StepReport(
                step=step,
                policy_version=version,
                groups=groups,
                stale_groups_dropped=tasks_per_step - groups,
                traces=len(batch),
                trained_tokens=tokens,
                mean_reward=statistics.fmean(rewards) if rewards else 0.0,
                loss=loss,
                max_logprob_gap=gap,
            )
        )
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    settings: Settings = get_settings()
    if not settings.admin_token:
        raise SystemExit("set POLAR_ADMIN_TOKEN (the gateway's admin token)")

    async def go() -> None:
        polar = await PolarClient.connect(settings)
        reports = await train(
            polar,
            policy_dir=args.policy_dir,
            vllm_url=f"http://127.0.0.1:{settings.vllm_port}",
            admin_token=settings.admin_token or "",
            steps=args.steps,
            tasks_per_step=args.tasks_per_step,
            group_size=args.group_size,
            lr=args.lr,
        )
        for report in reports:
            print(json.dumps(asdict(report)))

    asyncio.run(go())


if __name__ == "__main__":
    main()

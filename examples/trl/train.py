"""TRL's own GRPOTrainer learns through Polar: the tiny model, the digits task, on the CPU.

TRL does the learning (its `GRPOTrainer`: batching, group advantages, loss,
AdamW step); Polar does the sampling (`polar.trainers.trl.PolarRolloutFunc`):
each group is one Polar task of `--group-size` sessions of the GRPO example's
2-turn agent (`examples/grpo/agent/agent.py`, the `command` harness in the
sealed local sandbox, talking to the policy through the gateway), built with
`prefix_merging` (the two turns are one chain: the user's follow-up is mask 0)
and graded by the digit-share evaluator. After each optimizer step the
trainer's weights go into a folder of the trainer's own (never the one vLLM
serves), vLLM reloads them in place from it behind the gateway's pause, and
the policy version is bumped; the next batch was submitted before the step
(prefetch), so it sampled meanwhile.

Starts its own stack (Temporal, SeaweedFS, vLLM with in-place reload serving
an untied copy of the tiny model, the gateway, in-process workers) on free
loopback ports, writes one CSV row per step and the curve:

    .venv/bin/python examples/trl/train.py --steps 2                  # a smoke run
    .venv/bin/python examples/trl/train.py --steps 40 \\
        --csv docs/trl-reward.csv --png docs/trl-reward.png           # the learning benchmark
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a script from anywhere
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from activities.worker import running_workers  # noqa: E402
from app.devstack import DevStack  # noqa: E402
from examples.grpo.learn import MODEL, stack_settings  # noqa: E402
from examples.grpo.train import INSTRUCTION, task_for, untied_copy  # noqa: E402
from polar.settings import Settings  # noqa: E402
from polar.storage import Storage  # noqa: E402
from polar.tasks.spec import TaskSpec  # noqa: E402
from polar.trainers.trl import PolarRolloutFunc, polar_reward  # noqa: E402
from polar.trainers.weights import InPlaceReload  # noqa: E402


def digits_task(group_size: int, tokenizer: Path, turns: int = 2) -> TaskSpec:
    """The GRPO example's digits task, its turns merged into one chain per session.

    A random model's replies rarely survive decode and re-encode (the next turn's prompt
    shows them re-tokenised), so the chain is kept whole with `prefix_merging`'s
    `response_span` repair (the sampled tokens stay, mask 1, each exactly once; the end-of-turn
    ids come from `tokenizer`), else every session would end at its first turn."""
    spec = task_for("trl-digits", group_size, 0, turns)
    spec.builder.name = "prefix_merging"
    spec.builder.config = {"repair": "response_span", "tokenizer": str(tokenizer)}
    spec.metadata = {"example": "trl"}
    spec.policy_version = None
    return spec


def dataset(rows: int) -> Any:
    """A conversational prompt dataset: the one instruction, `rows` times."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [[{"role": "user", "content": INSTRUCTION}]] * rows})


def make_trainer(
    model_dir: Path,
    rollout: PolarRolloutFunc,
    *,
    steps: int,
    group_size: int,
    groups_per_step: int,
    lr: float,
    output_dir: Path,
    seed: int = 0,
) -> Any:
    """TRL's GRPOTrainer on the CPU (`use_cpu`, no bf16) with Polar's rollout and reward
    functions, starting from the model in `model_dir`."""
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=group_size * groups_per_step,
        num_generations=group_size,
        max_steps=steps,
        learning_rate=lr,
        lr_scheduler_type="constant",
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=seed,
        dataloader_num_workers=0,
    )
    return GRPOTrainer(
        model=str(model_dir),
        reward_funcs=polar_reward,
        args=config,
        train_dataset=dataset(steps * groups_per_step * group_size + group_size),
        rollout_func=rollout,
    )


@contextmanager
def workers_in_thread(settings: Settings) -> Iterator[None]:
    """Polar's workers on an event loop of their own thread, for as long as the block runs
    (TRL's training loop is synchronous)."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Event | None = None
    failure: list[BaseException] = []

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()
        async with running_workers(settings):
            ready.set()
            await stop.wait()

    def main() -> None:
        try:
            loop.run_until_complete(serve())
        except BaseException as exc:  # surfaced to the caller below
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=main, name="polar-workers", daemon=True)
    thread.start()
    ready.wait(300)
    if failure:
        raise RuntimeError("Polar's workers did not start") from failure[0]
    try:
        yield
    finally:
        if stop is not None:
            loop.call_soon_threadsafe(stop.set)
        thread.join(60)


def start_stack(data_dir: Path, served_dir: Path) -> tuple[DevStack, list[str]]:
    """Temporal, SeaweedFS, vLLM (in-place reload, serving `served_dir`) and the gateway."""
    stack = DevStack(stack_settings(data_dir, served_dir), workers=0, die_with_parent=True)
    names: list[str] = []
    try:
        for service in (stack.temporal(), stack.seaweedfs(), stack.vllm(), stack.gateway()):
            names.append(service.name)
            stack.start(service)
            if service.name == "seaweedfs":
                Storage(stack.settings).ensure_bucket()
    except BaseException:
        for name in reversed(names):
            stack.stop(name, quiet=True)
        raise
    return stack, names


def write_curve(rows: list[dict[str, Any]], csv_path: Path, png_path: Path, title: str) -> None:
    """The per-step CSV and the reward curve (mean ± std of the sessions' rewards)."""
    import csv

    csv_path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(rows[0])
    with csv_path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows if r["mean_reward"] is not None]
    mean = [r["mean_reward"] for r in rows if r["mean_reward"] is not None]
    std = [r["reward_std"] or 0.0 for r in rows if r["mean_reward"] is not None]
    fig, ax = plt.subplots(figsize=(7, 4))
    low = [m - s for m, s in zip(mean, std, strict=True)]
    high = [m + s for m, s in zip(mean, std, strict=True)]
    ax.fill_between(steps, low, high, alpha=0.25, label="± 1 std (sessions)")
    ax.plot(steps, mean, marker="o", markersize=3, label="mean reward")
    ax.axhline(0.9, color="grey", linestyle="--", linewidth=1, label="0.9")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("TRL optimizer step (policy version)")
    ax.set_ylabel("session reward (digit share)")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)


def step_rows(rollout: PolarRolloutFunc, log_history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per rollout call (= per optimizer step here): Polar's figures and TRL's loss."""
    losses = [h for h in log_history if "loss" in h]
    rows = []
    calls = rollout.stats.per_call
    for step, call in enumerate(calls):
        trl = losses[step] if step < len(losses) else {}
        after = calls[step + 1]["called_at"] if step + 1 < len(calls) else None
        rows.append(
            {
                "step": step,
                "policy_version": call["version"],
                "rows": call["rows"],
                "unscored": call["unscored"],
                "mean_reward": call["mean_reward"],
                "reward_std": call["reward_std"],
                "staleness_max": call["staleness_max"],
                "wait_s": call["wait_s"],
                "loss": trl.get("loss"),
                "trl_reward": trl.get("reward"),
                # from this rollout call to the next: sampling wait, sync, TRL's step
                "step_seconds": None if after is None else round(after - call["called_at"], 2),
            }
        )
    return rows


def curve_writer(
    rollout: PolarRolloutFunc, csv_path: Path, png_path: Path, title: Callable[[], str]
) -> Any:
    """A TRL callback: after each logged step, its row printed and the CSV and curve rewritten."""
    from transformers import TrainerCallback

    class CurveWriter(TrainerCallback):
        printed = 0

        def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            rows = step_rows(rollout, state.log_history)
            done = [r for r in rows if r["loss"] is not None]
            for row in done[self.printed :]:
                print(json.dumps(row), flush=True)
            self.printed = len(done)
            if done:
                write_curve(done, csv_path, png_path, title())

    return CurveWriter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--groups-per-step", type=int, default=1)
    parser.add_argument("--lr", type=float, default=2e-2)
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--no-prefetch", action="store_true")
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--csv", type=Path, default=REPO / ".polar" / "trl-learn" / "reward.csv")
    parser.add_argument("--png", type=Path, default=REPO / ".polar" / "trl-learn" / "reward.png")
    args = parser.parse_args()
    if not (MODEL / ".complete").exists():
        raise SystemExit(f"no tiny model at {MODEL}: run infra/setup.sh")

    started = time.monotonic()
    data_dir = Path(tempfile.mkdtemp(prefix="polar-trl-"))
    data_dir.chmod(0o711)  # the local runtime's unprivileged harness user reaches session dirs
    served_dir = data_dir / "served"
    untied_copy(MODEL, served_dir)  # vLLM's in-place reload refreshes an untied head only
    policy_dir = data_dir / "policy"  # the trainer's weights: vLLM reloads them from here
    stack, names = start_stack(data_dir, served_dir)
    settings = stack.settings
    ready = time.monotonic()
    rows: list[dict[str, Any]] = []
    try:
        with workers_in_thread(settings):
            rollout = PolarRolloutFunc(
                digits_task(args.group_size, served_dir),
                settings=settings,
                weights=InPlaceReload.from_settings(settings, policy_dir),
                max_staleness=args.max_staleness,
                prefetch=not args.no_prefetch,
            )
            trainer = make_trainer(
                served_dir,
                rollout,
                steps=args.steps,
                group_size=args.group_size,
                groups_per_step=args.groups_per_step,
                lr=args.lr,
                output_dir=data_dir / "trl-out",
            )

            def title() -> str:
                minutes = (time.monotonic() - started) / 60
                return (
                    f"TRL GRPOTrainer through Polar, tiny Qwen3 on 2 CPU cores: "
                    f"{args.groups_per_step}×{args.group_size} sessions/step, lr {args.lr:g}, "
                    f"{minutes:.0f} min"
                )

            trainer.add_callback(curve_writer(rollout, args.csv, args.png, title))
            try:
                trainer.train()
            finally:
                rollout.close()
            rows = step_rows(rollout, trainer.state.log_history)
            write_curve(rows, args.csv, args.png, title())
            stats = rollout.stats
    finally:
        for name in reversed(names):
            stack.stop(name, quiet=True)
        shutil.rmtree(data_dir, ignore_errors=True)
    done = time.monotonic()
    rewards = [r["mean_reward"] for r in rows if r["mean_reward"] is not None]
    reached = next((r["step"] for r in rows if (r["mean_reward"] or 0.0) >= args.target), None)
    print(
        json.dumps(
            {
                "steps": len(rows),
                "untrained_mean_reward": rewards[0] if rewards else None,
                "final_mean_reward": rewards[-1] if rewards else None,
                "best_mean_reward": max(rewards) if rewards else None,
                "first_step_at_target": reached,
                "target": args.target,
                "syncs": stats.syncs,
                "prefetch_used": stats.prefetch_used,
                "prefetch_dropped": stats.prefetch_dropped,
                "unscored_rows": stats.unscored_rows,
                "chains_left_out": stats.chains_left_out,
                "rollout_wait_s": round(stats.wait_s, 1),
                "sync_s": round(stats.sync_s, 1),
                "stack_start_s": round(ready - started, 1),
                "training_s": round(done - ready, 1),
                "wall_s": round(done - started, 1),
                "csv": str(args.csv),
                "png": str(args.png),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

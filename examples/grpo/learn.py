"""GRPO learning benchmark: the tiny model learns the digits task through Polar, on the CPU.

Starts its own stack on free loopback ports (Temporal dev server, SeaweedFS,
vLLM CPU build serving a writable, untied copy of the tiny model with in-place
weight reload, the gateway, in-process workers), runs `train.train` for
`--steps` steps and writes one row per step to `--csv` and the curve to
`--png` after every step. Prints one JSON line per step and a summary: the
first step that reached `--target`, the untrained and final mean reward, and
the wall time.

    .venv/bin/python examples/grpo/learn.py --csv docs/grpo-reward.csv --png docs/grpo-reward.png
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

from activities.worker import running_workers  # noqa: E402
from app.devstack import DevStack  # noqa: E402
from examples.grpo.curve import plot, write_csv  # noqa: E402
from examples.grpo.train import (  # noqa: E402
    StepReport,
    report_line,
    train_with_args,
    untied_copy,
)
from polar.client.sdk import PolarClient  # noqa: E402
from polar.settings import Settings  # noqa: E402
from polar.storage import Storage  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

MODEL = REPO / ".polar" / "models" / "tiny-qwen3"


def stack_settings(data_dir: Path, served_dir: Path) -> Settings:
    """Every service of the run on its own block of free loopback ports."""
    base = free_port(span=48)  # Temporal +0/+10/+20, UI +1, SeaweedFS +30..+37
    return Settings(
        data_dir=data_dir,
        temporal_address=f"127.0.0.1:{base}",
        temporal_ui_port=base + 1,
        s3_endpoint=f"http://127.0.0.1:{base + 30}",
        s3_bucket="polar-grpo",
        gateway_port=base + 40,
        vllm_port=base + 41,
        admin_port=base + 42,
        upstream_urls=f"http://127.0.0.1:{base + 41}/v1",
        model_dir=served_dir,
        vllm_python=REPO / ".venv-vllm" / "bin" / "python",
        vllm_weight_reload=True,
        admin_token=secrets.token_urlsafe(24),
        session_secret=secrets.token_urlsafe(32),
        source_roots=str(REPO),
        log_format="text",
    )


async def run(args: argparse.Namespace, settings: Settings, policy_dir: Path) -> list[StepReport]:
    reports: list[StepReport] = []
    started = time.monotonic()

    def on_step(report: StepReport) -> None:
        reports.append(report)
        print(report_line(report), flush=True)
        write_csv(reports, args.csv)
        plot(reports, args.png, title=args.title or title(args, time.monotonic() - started))

    async with running_workers(settings):
        polar = await PolarClient.connect(settings)
        await train_with_args(polar, settings, policy_dir, args, on_step)
    return reports


def title(args: argparse.Namespace, seconds: float) -> str:
    return (
        f"GRPO, tiny Qwen3 on CPU: {args.tasks_per_step}×{args.group_size} sessions/step, "
        f"lr {args.lr:g}, {seconds / 60:.0f} min"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-2)
    parser.add_argument("--max-policy-lag", type=int, default=1)
    parser.add_argument("--overlap", action="store_true", help="sample the next step meanwhile")
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--csv", type=Path, default=REPO / ".polar" / "grpo-learn" / "reward.csv")
    parser.add_argument("--png", type=Path, default=REPO / ".polar" / "grpo-learn" / "reward.png")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    if args.max_policy_lag < 0:
        parser.error("--max-policy-lag must be >= 0")
    if not (MODEL / ".complete").exists():
        raise SystemExit(f"no tiny model at {MODEL}: run infra/setup.sh")

    started = time.monotonic()
    # the local runtime's unprivileged harness user must reach the session dirs
    data_dir = Path(tempfile.mkdtemp(prefix="polar-grpo-"))
    data_dir.chmod(0o711)
    served_dir = data_dir / "served"
    untied_copy(MODEL, served_dir)  # vLLM's in-place reload refreshes an untied head only
    policy_dir = data_dir / "policy"  # the trainer's weights: vLLM reloads them from here
    stack = DevStack(stack_settings(data_dir, served_dir), workers=0, die_with_parent=True)
    settings = stack.settings
    names: list[str] = []
    try:
        for service in (stack.temporal(), stack.seaweedfs(), stack.vllm(), stack.gateway()):
            names.append(service.name)
            stack.start(service)
            if service.name == "seaweedfs":
                Storage(settings).ensure_bucket()
        ready = time.monotonic()
        reports = asyncio.run(run(args, settings, policy_dir))
    finally:
        for name in reversed(names):
            stack.stop(name, quiet=True)
        shutil.rmtree(data_dir, ignore_errors=True)
    done = time.monotonic()
    rewards = [r.mean_reward for r in reports if r.mean_reward is not None]
    reached = next((r.step for r in reports if (r.mean_reward or 0.0) >= args.target), None)
    gaps = [r.max_logprob_gap for r in reports if r.max_logprob_gap is not None]
    summary = {
        "steps": len(reports),
        "untrained_mean_reward": rewards[0] if rewards else None,
        "final_mean_reward": rewards[-1] if rewards else None,
        "best_mean_reward": max(rewards) if rewards else None,
        "first_step_at_target": reached,
        "target": args.target,
        "max_logprob_gap": max(gaps) if gaps else None,
        "stale_traces_dropped": sum(r.stale_traces_dropped for r in reports),
        "stack_start_s": round(ready - started, 1),
        "training_s": round(done - ready, 1),
        "wall_s": round(done - started, 1),
        "csv": str(args.csv),
        "png": str(args.png),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

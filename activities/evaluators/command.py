"""The `command` evaluator: run a command in the session's runtime; exit 0 → reward 1.

The command sees `POLAR_TRACES_FILE` (the session's traces, JSONL, one Trace a
line) and may write `POLAR_REWARD_FILE`, a JSON object overriding the exit-code
reward and giving per-trace rewards:

    {"reward": 0.5, "trace_rewards": {"<trace_id>": 1.0}, "detail": "why"}

Traces it names get their own reward; the others get the session reward under
the builder's reward policy.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from activities.runtimes.base import Runtime
from polar.models import EvaluatorSpec, RuntimeHandle


class InvalidRewardFile(ValueError):
    """The evaluator wrote a reward file that is not the documented JSON object."""


@dataclass
class Evaluation:
    reward: float
    detail: str
    trace_rewards: dict[str, float] = field(default_factory=dict)


async def evaluate_command(
    runtime: Runtime,
    handle: RuntimeHandle,
    spec: EvaluatorSpec,
    *,
    timeout_s: float,
    traces_file: Path | None = None,
    on_tick: Callable[[float], Awaitable[None] | None] | None = None,
) -> Evaluation:
    """Run the evaluator command; reward by exit code unless it wrote a reward file."""
    assert spec.command
    reward_file = runtime.scratch(handle) / "reward.json"
    reward_file.unlink(missing_ok=True)
    env = {"POLAR_REWARD_FILE": str(reward_file)}
    if traces_file is not None:
        env["POLAR_TRACES_FILE"] = str(traces_file)
    outcome = await runtime.run(
        handle, spec.command, env=env, log_name="evaluate", timeout_s=timeout_s, on_tick=on_tick
    )
    if outcome.timed_out:
        return Evaluation(0.0, f"evaluation timed out after {timeout_s:.0f}s")
    evaluation = Evaluation(
        1.0 if outcome.exit_code == 0 else 0.0, f"evaluator exited {outcome.exit_code}"
    )
    if reward_file.exists():
        _apply_reward_file(evaluation, reward_file)
    return evaluation


def _apply_reward_file(evaluation: Evaluation, path: Path) -> None:
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        if "reward" in data:
            evaluation.reward = float(data["reward"])
        rewards = data.get("trace_rewards") or {}
        if not isinstance(rewards, dict):
            raise TypeError("trace_rewards must be an object of trace id → number")
        evaluation.trace_rewards = {str(k): float(v) for k, v in rewards.items()}
        if data.get("detail"):
            evaluation.detail = f"{evaluation.detail}; {data['detail']}"
    except (ValueError, TypeError) as exc:
        raise InvalidRewardFile(f"evaluator reward file {path}: {exc}") from exc

"""The `command` evaluator: run a command in the session's runtime; exit 0 → reward 1."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from activities.runtimes.base import Runtime
from polar.models import EvaluatorSpec, RuntimeHandle


async def evaluate_command(
    runtime: Runtime,
    handle: RuntimeHandle,
    spec: EvaluatorSpec,
    *,
    timeout_s: float,
    on_tick: Callable[[float], Awaitable[None] | None] | None = None,
) -> tuple[float, str]:
    """Reward 1.0 when the command exits 0, else 0.0; with a one-line explanation."""
    assert spec.command
    outcome = await runtime.run(
        handle, spec.command, env={}, log_name="evaluate", timeout_s=timeout_s, on_tick=on_tick
    )
    if outcome.timed_out:
        return 0.0, f"evaluation timed out after {timeout_s:.0f}s"
    reward = 1.0 if outcome.exit_code == 0 else 0.0
    return reward, f"evaluator exited {outcome.exit_code}"

"""The `command` evaluator: run a command where the harness never was; exit 0 → reward 1.

The command runs in the evaluator's fresh runtime (activities/evaluators/fresh.py):
the task's source, prepared again, plus the session's changes (a binary diff
of its workspace against the baseline recorded when it was prepared), minus
the paths the task declares `protected`, which keep the task's own copy. A
session whose changes cannot be read (its harness broke the workspace's git)
or do not apply gets reward 0, with the reason in the detail.

The command sees `POLAR_TRACES_FILE` (the session's traces, JSONL, one Trace a
line) and may write `POLAR_REWARD_FILE`, a JSON object overriding the exit-code
reward and giving per-trace rewards:

    {"reward": 0.5, "trace_rewards": {"<trace_id>": 1.0}, "detail": "why"}

Traces it names get their own reward; the others get the session reward under
the builder's reward policy. Both files are in the evaluator runtime's scratch
folder, which the session's harness cannot reach; the reward file is removed
before the command runs and read after every process it left is killed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

from activities.evaluators.base import Evaluation, EvaluationJob, EvaluatorError, Tick, reap
from activities.evaluators.fresh import carry_changes
from activities.runtimes.base import Runtime
from polar.contracts import RuntimeHandle
from polar.evaluation_reports import Baselines, CommandReport, EvaluationReport
from polar.tasks.spec import EvaluatorSpec

__all__ = ["CommandEvaluator", "Evaluation", "InvalidRewardFile", "evaluate_command"]

LOG_NAME = "evaluate"
"""The command's log in the evaluator runtime (kept as `evaluate.stdout` / `.stderr`)."""


class InvalidRewardFile(ValueError):
    """The evaluator wrote a reward file that is not the documented JSON object."""


async def evaluate_command(
    session_runtime: Runtime,
    session_handle: RuntimeHandle,
    eval_runtime: Runtime,
    eval_handle: RuntimeHandle,
    spec: EvaluatorSpec,
    *,
    timeout_s: float,
    traces: bytes | None = None,
    on_tick: Tick = None,
) -> Evaluation:
    """Grade the session's changes with the evaluator command in the (fresh, prepared)
    evaluator runtime. Raises EvaluatorError where the task cannot be graded at all."""
    assert spec.command
    if session_handle.baseline is None:
        raise EvaluatorError(
            "the session's runtime has no git baseline to diff against (prepared by an older "
            "worker, or git is missing in its runtime)"
        )
    changes = await carry_changes(
        session_runtime,
        session_handle,
        session_handle.baseline,
        eval_runtime,
        eval_handle,
        protected=spec.protected,
        timeout_s=timeout_s,
        on_tick=on_tick,
    )
    report = CommandReport(
        # equal when both runtimes were prepared alike (fixed author and dates)
        baselines=Baselines(session=session_handle.baseline, eval=eval_handle.baseline)
    )
    changes.fill(report)
    evaluation = Evaluation(0.0, "", report=report, patch=changes.patch)
    if changes.extract_error is not None:
        evaluation.detail = (
            "the session's changes could not be read from its workspace (was its git "
            f"removed or broken?): {changes.extract_error[:300]}"
        )
        return evaluation
    if not changes.applied:
        evaluation.detail = (
            f"the session's changes did not apply in a fresh runtime "
            f"({len(changes.attempts)} strategies tried)"
        )
        return evaluation

    scratch = eval_runtime.scratch(eval_handle)
    reward_file = scratch / "reward.json"
    reward_file.unlink(missing_ok=True)
    env = {"POLAR_REWARD_FILE": str(reward_file)}
    if traces is not None:
        traces_file = scratch / "traces.jsonl"
        traces_file.write_bytes(traces)
        env["POLAR_TRACES_FILE"] = str(traces_file)
    outcome = await eval_runtime.run(
        eval_handle,
        spec.command,
        env=env,
        log_name=LOG_NAME,
        timeout_s=timeout_s,
        on_tick=on_tick,
    )
    await reap(eval_runtime, eval_handle)
    report.exit_code = outcome.exit_code
    if outcome.timed_out:
        evaluation.detail = f"evaluation timed out after {timeout_s:.0f}s"
        return evaluation
    evaluation.reward = 1.0 if outcome.exit_code == 0 else 0.0
    evaluation.detail = f"evaluator exited {outcome.exit_code}"
    if changes.protected_dropped:
        evaluation.detail += f"; protected files kept: {', '.join(changes.protected_dropped[:5])}"
    if reward_file.exists():
        _apply_reward_file(evaluation, reward_file)
        report.reward_file = True
    return evaluation


class CommandEvaluator:
    """`kind: command`: the task's command in a fresh runtime holding the session's changes;
    it may read the session's traces and write per-trace rewards."""

    kind: ClassVar[str] = "command"
    needs_fresh_runtime: ClassVar[bool] = True
    needs_traces: ClassVar[bool] = True
    report_model: ClassVar[type[EvaluationReport]] = CommandReport

    async def evaluate(self, job: EvaluationJob) -> Evaluation:
        eval_runtime, eval_handle = job.fresh()
        return await evaluate_command(
            job.session_runtime,
            job.session_handle,
            eval_runtime,
            eval_handle,
            job.spec,
            timeout_s=job.timeout_s,
            traces=job.traces,
            on_tick=job.on_tick,
        )

    def logs(self, job: EvaluationJob, evaluation: Evaluation) -> dict[str, bytes]:
        """The command's stdout and stderr (empty where it never ran)."""
        eval_runtime, eval_handle = job.fresh()
        return {
            path.name: path.read_bytes() if path.exists() else b""
            for path in eval_runtime.log_paths(eval_handle, LOG_NAME)
        }


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
        raise InvalidRewardFile(f"evaluator reward file: {exc}") from exc

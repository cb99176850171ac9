"""The `command` evaluator: run a command where the harness never was; exit 0 → reward 1.

The command runs in the evaluator's fresh runtime (activities/evaluators/fresh.py):
the task's source, prepared again, plus the session's changes (a binary diff
of its workspace against the baseline recorded when it was prepared), minus
task-owned paths, which keep the task's own copy: `PROTECTED` (conftest-like
files, activities/evaluators/protected.py), the files the command names that
exist at base (its test script, its test files), and the task's `protected`
globs. A session whose changes cannot be read (its harness broke the
workspace's git) or do not apply gets reward 0, with the reason in the detail.

`command` runs the code under test, so nothing of the reward is named in its
environment: its exit code is the reward. An optional `reward_command` runs
after it, once every process the command left is killed, where the code under
test never ran: a second fresh runtime of the untouched task (id
`{session}-reward`, its own interpreter, venv and HOME), with a copy of the graded
workspace, its working directory outside it, `PYTHONSAFEPATH=1` and
`PYTHONNOUSERSITE=1`; it alone sees `POLAR_COMMAND_EXIT_CODE`, `POLAR_WORKSPACE`
(the copy of the graded workspace, to read what the command left there by explicit
path), `POLAR_TRACES_FILE` (the session's traces, JSONL, one Trace a line) and
`POLAR_REWARD_FILE`, where it must write a JSON object (a run that writes none is
an evaluator error, never the exit-code reward) overriding the exit-code reward
and giving per-trace rewards:

    {"reward": 0.5, "trace_rewards": {"<trace_id>": 1.0}, "detail": "why"}

Traces it names get their own reward; the others get the session reward under
the builder's reward policy. Both files are in the evaluator runtime's scratch
folder under names drawn afresh for the run (written and read no-follow,
activities/safe_files.py). What the copy holds was written by the code under test: a
reward_command must not trust it beyond what it checks (docs/threat-model.md).
"""

from __future__ import annotations

import json
import secrets
import shlex
from collections.abc import Sequence
from typing import ClassVar

from activities import safe_files
from activities.evaluators.base import (
    GIT,
    Evaluation,
    EvaluationJob,
    EvaluatorConfig,
    EvaluatorError,
    Tick,
    reap,
)
from activities.evaluators.command.config import CommandConfig
from activities.evaluators.command.report import CommandReport
from activities.evaluators.fresh import carry_changes, fresh_runtime
from activities.evaluators.patches import JUNK_DIRS, glob_match, revision
from activities.evaluators.protected import PROTECTED, command_path_candidates
from activities.evaluators.workspace_git import WorkspaceGit, workspace_git
from activities.runtimes.base import Runtime
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.evaluation_reports import Baselines, EvaluationReport
from polar.tasks.spec import EvaluatorSpec

__all__ = ["CommandEvaluator", "Evaluation", "InvalidRewardFile", "evaluate_command"]

LOG_NAME = "evaluate"
"""The command's log in the evaluator runtime (kept as `evaluate.stdout` / `.stderr`)."""
REWARD_LOG_NAME = "evaluate-reward"
"""The reward_command's log (kept beside the command's)."""
MAX_REWARD_FILE_BYTES = 16 << 20


class InvalidRewardFile(EvaluatorError, ValueError):
    """The reward_command wrote a reward file that is not the documented JSON object."""


async def command_files(
    git: WorkspaceGit, command: str, workdir: str, base: str, touched: Sequence[str]
) -> list[str]:
    """The files at commit `base` of the evaluator's workspace that `command` names and that
    a path of `touched` (the patch's) matches (the others protect nothing)."""
    candidates = [
        c
        for c in command_path_candidates(command, workdir)
        if any(glob_match(path, c) for path in touched)
    ]
    if not candidates:
        return []
    out = git.out / f"command-files-{secrets.token_hex(8)}"
    listing = (
        f"{GIT} ls-tree -z {revision(base)} -- "
        + " ".join(shlex.quote(c) for c in candidates)
        + f" > {shlex.quote(str(out))}"
    )
    code, log = await git.read_only(listing, "command-files", 60)
    data = safe_files.read_bytes(git.out, out.name, limit=16 << 20)
    safe_files.remove(git.out, out.name)
    if code != 0 or data is None:
        raise EvaluatorError(f"cannot list the files the command names: {log.strip()[-500:]}")
    files = []
    for entry in data.decode("utf-8", "surrogateescape").split("\0"):
        meta, _, path = entry.partition("\t")
        if path and meta.split(" ")[1:2] == ["blob"]:
            files.append(path)
    return files


def protected_paths(spec: EvaluatorSpec, named: Sequence[str]) -> list[str]:
    """`PROTECTED`, the files the command names, then the task's own globs."""
    return list(dict.fromkeys([*PROTECTED, *named, *spec.protected]))


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
    prepare: PrepareRequest | None = None,
) -> Evaluation:
    """Grade the session's changes with the evaluator command in the (fresh, prepared)
    evaluator runtime (`prepare`: how it was prepared, for the reward_command's runtime).
    Raises EvaluatorError where the task cannot be graded at all."""
    assert spec.command
    if session_handle.baseline is None:
        raise EvaluatorError(
            "the session's runtime has no git baseline to diff against (prepared by an older "
            "worker, or git is missing in its runtime)"
        )
    command = spec.command
    async with workspace_git(eval_runtime, eval_handle) as git:

        async def named(touched: list[str]) -> list[str]:
            base = eval_handle.baseline or "HEAD"
            return await command_files(git, command, eval_handle.workdir, base, touched)

        changes = await carry_changes(
            session_runtime,
            session_handle,
            session_handle.baseline,
            eval_runtime,
            eval_handle,
            protected=protected_paths(spec, ()),
            named=named,
            git=git,
            timeout_s=timeout_s,
            on_tick=on_tick,
        )
    report = CommandReport(
        # equal when both runtimes were prepared alike (fixed author and dates)
        baselines=Baselines(session=session_handle.baseline, eval=eval_handle.baseline)
    )
    evaluation = changes.evaluation(report)
    if not changes.applied:
        return evaluation

    outcome = await eval_runtime.run(
        eval_handle,
        spec.command,
        env={},
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
    if spec.reward_command:
        await _reward_command(
            eval_runtime,
            eval_handle,
            prepare,
            spec.reward_command,
            outcome.exit_code,
            traces,
            evaluation,
            report,
            timeout_s,
            on_tick,
        )
    return evaluation


REWARD_SUFFIX = "-reward"
"""The id suffix of a reward_command's runtime (`{session}-reward`)."""


async def _reward_command(
    runtime: Runtime,
    handle: RuntimeHandle,
    prepare: PrepareRequest | None,
    command: str,
    exit_code: int | None,
    traces: bytes | None,
    evaluation: Evaluation,
    report: CommandReport,
    timeout_s: float,
    on_tick: Tick,
) -> None:
    """Run the reward_command where the code under test never ran, and apply its reward file.

    The command's runtime is not trusted once the code under test has run there (it may have
    replaced the interpreter, planted a `usercustomize.py` under its HOME, or rewritten the
    venv). So the graded workspace is copied out (no process of it runs) into the scratch of
    a second fresh runtime, prepared like the first from the untouched task (`prepare`),
    whose interpreter, HOME and venv nothing of the session touched; the reward_command runs
    there with `POLAR_WORKSPACE` naming that copy, `PYTHONNOUSERSITE=1`, its working
    directory outside it. A run that writes no reward file is an EvaluatorError, never the
    command's exit-code reward."""
    if prepare is None:
        raise EvaluatorError("a reward_command needs a fresh runtime to run in, and got none")
    reward_prepare = prepare.model_copy(
        update={"session_id": prepare.session_id.removesuffix("-eval") + REWARD_SUFFIX}
    )
    async with fresh_runtime(runtime, reward_prepare, on_tick=on_tick) as reward_handle:
        scratch = runtime.scratch(reward_handle)
        tag = secrets.token_hex(16)  # names the code under test could not know in advance
        graded = scratch / f"graded-{tag}"
        graded.mkdir()
        await runtime.copy_workspace(handle, graded, JUNK_DIRS)
        reward_name, traces_name = f"reward-{tag}.json", f"traces-{tag}.jsonl"
        safe_files.write_bytes(scratch, traces_name, traces or b"")
        env = {
            "POLAR_REWARD_FILE": str(scratch / reward_name),
            "POLAR_TRACES_FILE": str(scratch / traces_name),
            "POLAR_COMMAND_EXIT_CODE": "" if exit_code is None else str(exit_code),
            "POLAR_WORKSPACE": str(graded),
            "PYTHONSAFEPATH": "1",
            "PYTHONNOUSERSITE": "1",
        }
        outside = 'cd "$(mktemp -d)" || exit 1\n'
        outcome = await runtime.run(
            reward_handle,
            outside + command,
            env=env,
            log_name=REWARD_LOG_NAME,
            timeout_s=timeout_s,
            on_tick=on_tick,
        )
        await reap(runtime, reward_handle)
        report.reward_command_exit_code = outcome.exit_code
        try:
            data = safe_files.read_bytes(scratch, reward_name, limit=MAX_REWARD_FILE_BYTES)
        except safe_files.UnsafePath as exc:
            raise InvalidRewardFile(f"reward file: {exc}") from exc
        # its logs go where `logs` reads them, beside the command's (the worker's own dir)
        moved = zip(
            runtime.log_paths(reward_handle, REWARD_LOG_NAME),
            runtime.log_paths(handle, REWARD_LOG_NAME),
            strict=True,
        )
        for src, dst in moved:
            data_log = safe_files.read_log_file(src, limit=MAX_REWARD_FILE_BYTES)
            safe_files.write_bytes(dst.parent, dst.name, data_log)
    if outcome.timed_out or outcome.exit_code != 0:
        why = "timed out" if outcome.timed_out else f"exited {outcome.exit_code}"
        raise EvaluatorError(f"the evaluator's reward_command {why}")
    if data is None:
        raise EvaluatorError(
            "the evaluator's reward_command wrote no reward file ($POLAR_REWARD_FILE): no "
            "reward is given from the command's exit code alone when a reward_command is set"
        )
    _apply_reward_file(evaluation, data)
    report.reward_file = True


class CommandEvaluator:
    """`kind: command`: the task's command in a fresh runtime holding the session's changes;
    it may read the session's traces and write per-trace rewards."""

    kind: ClassVar[str] = "command"
    needs_fresh_runtime: ClassVar[bool] = True
    needs_traces: ClassVar[bool] = True
    report_model: ClassVar[type[EvaluationReport]] = CommandReport
    config_model: ClassVar[type[EvaluatorConfig]] = CommandConfig

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
            prepare=job.prepare,
        )

    def logs(self, job: EvaluationJob, evaluation: Evaluation) -> dict[str, bytes]:
        """The command's stdout and stderr (empty where it never ran), then the
        reward_command's where it ran."""
        eval_runtime, eval_handle = job.fresh()
        limit = job.settings.max_log_bytes
        logs = {
            path.name: safe_files.read_log_file(path, limit=limit)
            for path in eval_runtime.log_paths(eval_handle, LOG_NAME)
        }
        for path in eval_runtime.log_paths(eval_handle, REWARD_LOG_NAME):
            if path.exists():
                logs[path.name] = safe_files.read_log_file(path, limit=limit)
        return logs


def _apply_reward_file(evaluation: Evaluation, raw: bytes) -> None:
    try:
        data = json.loads(raw)
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

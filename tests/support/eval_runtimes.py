"""Runtimes the evaluator tests grade in, and one session graded the way `evaluate` does it."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path

from activities.evaluators import EvaluationJob, get_evaluator
from activities.evaluators.base import Evaluation, reap
from activities.evaluators.baseline import record_baseline
from activities.evaluators.fresh import eval_prepare_request, fresh_runtime
from activities.evaluators.reward_checks import check_rewards
from activities.runtimes.base import Runtime
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.tasks.spec import EvaluatorSpec, RuntimeSpec, Source

# pytest and what it imports (pure Python), for a local runtime's own interpreter
PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py.py")


def python_with_pytest(root: Path) -> Path:
    """The bin dir of a venv of the system Python (which the local runtime's unprivileged
    user can run) holding pytest, copied from the project's venv: what a repository's own
    test environment gives its evaluator. Readable by everyone."""
    venv = root / "pytest-venv"
    if not (venv / "bin" / "python").exists():
        system = shutil.which("python3", path="/usr/bin:/bin")
        assert system, "no system python3"
        subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True)
        version = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sys; print(sys.version_info[1])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        target = venv / "lib" / f"python3.{version}" / "site-packages"
        source = Path(sysconfig.get_paths()["purelib"])
        dist_infos = [d.name for n in PYTEST_PACKAGES for d in source.glob(f"{n}-*.dist-info")]
        for name in (*PYTEST_PACKAGES, *dist_infos):
            src = source / name
            if src.is_dir():
                shutil.copytree(src, target / name, ignore=shutil.ignore_patterns("*.pyc"))
            else:
                shutil.copy2(src, target / name)
        subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
    return venv / "bin"


async def prepare_session(
    runtime: Runtime, spec: RuntimeSpec, source: Source | None, session_id: str
) -> RuntimeHandle:
    """A session's runtime as `prepare_runtime` makes it (with its baseline)."""
    handle = await runtime.prepare(
        PrepareRequest(session_id=session_id, task_id="t", runtime=spec, source=source)
    )
    return await record_baseline(runtime, handle)


async def run_harness(runtime: Runtime, handle: RuntimeHandle, script: str) -> None:
    """Run a `command` harness's script in the session's runtime, then reap what it left.
    A script that did not exit 0 is printed with its stderr (pytest shows it on failure)."""
    outcome = await runtime.run(handle, script, env={}, log_name="harness", timeout_s=120)
    if outcome.exit_code != 0:
        stderr = runtime.log_paths(handle, "harness")[1]
        tail = stderr.read_text(errors="replace")[-2000:] if stderr.exists() else ""
        print(f"harness {script!r}: exit {outcome.exit_code}, timed out {outcome.timed_out}")
        print(f"its stderr: {tail}")
    await reap(runtime, handle)


async def grade(
    runtime: Runtime,
    spec: RuntimeSpec,
    source: Source | None,
    session: RuntimeHandle,
    evaluator: EvaluatorSpec,
    *,
    traces: bytes | None = None,
    timeout_s: float = 120,
    prewarmed: RuntimeHandle | None = None,
) -> Evaluation:
    """Grade `session` as the `evaluate` activity does: a fresh runtime of the source (and the
    instance's install; or `prewarmed`, made by `prepare_eval`), the session's changes carried
    over (by the registered evaluator of its kind), rewards checked."""
    prepare = eval_prepare_request(session.session_id, "t", source, spec, spec.kind, evaluator)
    async with fresh_runtime(runtime, prepare, prewarmed) as eval_handle:
        job = EvaluationJob(
            runtime,
            session,
            runtime,
            eval_handle,
            evaluator,
            timeout_s=timeout_s,
            traces=traces,
            prepare=prepare,
        )
        evaluation = await get_evaluator(evaluator.kind).evaluate(job)
    if evaluation.report.evaluator_error:
        return evaluation
    return check_rewards(evaluation, evaluator.reward_range)


async def prepare_eval(
    runtime: Runtime,
    spec: RuntimeSpec,
    source: Source | None,
    session: RuntimeHandle,
    evaluator: EvaluatorSpec,
) -> RuntimeHandle:
    """The evaluator's runtime prepared ahead, as the prewarm does while the harness runs."""
    prepare = eval_prepare_request(session.session_id, "t", source, spec, spec.kind, evaluator)
    return await record_baseline(runtime, await runtime.prepare(prepare))

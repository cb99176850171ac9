"""The `swebench` evaluator: grade a session's patch with its instance's tests.

1. The evaluator's fresh runtime (activities/evaluators/fresh.py) holds the
   task's source at `base_commit`, with the instance's `install` already run
   (a prepare action, while the harness ran).
2. The session's patch (its workspace against `base_commit`, binary-safe,
   junk left out; activities/evaluators/patches.py) is applied there, minus
   task-owned files: the graded test files (and the `__init__.py` of their
   folders), the task's `protected` globs, and `PROTECTED`: files that
   configure or hook into pytest (`conftest.py`, `pytest.ini`, `tox.ini`,
   `sitecustomize.py`, `*.pth`, modules shadowing pytest or Polar's plugin).
   `setup.cfg` and `pyproject.toml` often carry real fixes (metadata,
   dependencies) and are kept, but if the patch changes their pytest section
   (`[tool:pytest]`, `[tool.pytest...]`) the file is restored whole. The
   report lists all of them as `protected_files_dropped`.
3. The test patch's files are reset to `base_commit`, the test patch applied,
   the tests run (`test_cmd`, default `python -m pytest -rA -p
   no:cacheprovider` on the test files), every process they left is killed.
4. Per-test results come from pytest itself: Polar's plugin
   (pytest_results.py, loaded through `PYTEST_PLUGINS` from the scratch folder,
   outside the workspace) writes each report to a file in scratch; colour,
   `-rA` and whatever the code under test prints do not matter. Only an
   instance that sets `log_parser` (a test command that is not pytest) has
   its log parsed, with that swebench parser: the trusting mode. Grading is
   SWE-bench's `get_eval_tests_report`: reward 1 only if every FAIL_TO_PASS
   test passes and every PASS_TO_PASS test still passes, and the run is
   consistent (the test command exited 0 or 1, every pytest session finished,
   an exit code 1 came with a failure, an exit code 0 without one).

The report (JSON) says which tests passed and failed and flags an empty
patch, a patch that did not apply, a test timeout and an evaluator error:
the instance itself is broken (its base commit or test patch, tests that
never ran pytest, none of its FAIL_TO_PASS / PASS_TO_PASS tests reported by
a clean pytest run); the activity fails the session rather than give a reward.

Residual trust: the code under test runs inside pytest's process, so a
patch that rewrites pytest's own reporting from package code is not caught.

Every step runs through `Runtime.run` with files exchanged through
`Runtime.scratch`, so it works the same on the local and container runtimes.
"""

from __future__ import annotations

import configparser
import shlex
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from activities.evaluators.base import (
    GIT,
    Evaluation,
    EvaluationJob,
    EvaluatorError,
    Tick,
    reap,
    run_in,
)
from activities.evaluators.fresh import (
    carry_changes,
    eval_prepare_request,
    fresh_runtime,
)
from activities.evaluators.patches import (
    APPLY_STRATEGIES,
    apply_patch,
    checked_base_commit,
    extract_patch,
    filter_patch,
    is_junk,
    patch_files,
    resolve_commit,
    revision,
    split_patch,
)
from activities.evaluators.statuses import PytestRun, read_results
from activities.runtimes.base import Runtime
from polar.contracts import RuntimeHandle
from polar.evaluation_reports import (
    EvaluationReport,
    PytestSessions,
    SweBenchReport,
    TestOutcomes,
)
from polar.tasks.spec import SweBenchSpec

__all__ = [
    "EvaluatorError",
    "SweBenchEvaluator",
    "SweEvaluation",
    "apply_patch",
    "build_test_command",
    "eval_prepare_request",
    "evaluate_swebench",
    "extract_patch",
    "filter_patch",
    "fresh_runtime",
    "is_junk",
    "split_patch",
]

DEFAULT_TEST_CMD = "python -m pytest -rA -p no:cacheprovider"
PLUGIN_MODULE = "polar_pytest_results"

# task-owned whatever the instance says: pytest's configuration and hooks, and modules that
# would shadow pytest or Polar's plugin from the repository root (first on sys.path)
PROTECTED = (
    "**/conftest.py",
    "**/pytest.ini",
    "**/.pytest.ini",
    "**/pytest.toml",
    "**/.pytest.toml",
    "**/tox.ini",
    "**/sitecustomize.py",
    "**/usercustomize.py",
    "**/*.pth",
    "pytest.py",
    "pytest/**",
    "_pytest/**",
    "pluggy/**",
    "py.py",
    f"**/{PLUGIN_MODULE}.py",
    f"**/{PLUGIN_MODULE}/**",
)
# kept, unless the patch changes their pytest section
PYTEST_SECTION_FILES = ("setup.cfg", "pyproject.toml")


@dataclass
class SweEvaluation(Evaluation):
    """The outcome, its JSON report, and the files worth keeping as artifacts."""

    report: SweBenchReport = field(default_factory=SweBenchReport)
    test_log: bytes = b""


# --------------------------------------------------------------------------- tests


def default_test_files(spec: SweBenchSpec) -> list[str]:
    """The files of the instance's pytest ids, then those its test patch touches."""
    files: list[str] = []
    for test in [*spec.fail_to_pass, *spec.pass_to_pass]:
        head = test.split("::", 1)[0]
        if "::" in test and head.endswith(".py"):
            files.append(head)
    files += [f for f in patch_files(spec.test_patch) if f.endswith(".py")]
    return list(dict.fromkeys(files))


def build_test_command(spec: SweBenchSpec) -> str:
    files = spec.test_files if spec.test_files is not None else default_test_files(spec)
    quoted = " ".join(shlex.quote(f) for f in files)
    cmd = spec.test_cmd or DEFAULT_TEST_CMD
    if "{test_files}" in cmd:
        return cmd.replace("{test_files}", quoted)
    return f"{cmd} {quoted}".strip()


def protected_paths(spec: SweBenchSpec, extra: Sequence[str] = ()) -> list[str]:
    """Globs of what the session's patch may not change: PROTECTED, the task's own, the graded
    test files (those run, those of the test ids, the test patch's) and their `__init__.py`."""
    tests = [*(spec.test_files or []), *default_test_files(spec), *patch_files(spec.test_patch)]
    inits = [  # a test folder's package file runs before its tests (package code does not count)
        f"{folder}/__init__.py"
        for test in tests
        for folder in PurePosixPath(test).parents
        if "test" in folder.name.lower()
    ]
    return list(dict.fromkeys([*PROTECTED, *extra, *tests, *inits]))


def pytest_env_prefix(plugin_dir: Path, results: Path) -> str:
    """Shell lines that load Polar's results plugin into every pytest the test command runs."""
    return (
        f'export PYTHONPATH={shlex.quote(str(plugin_dir))}"${{PYTHONPATH:+:$PYTHONPATH}}"\n'
        f'export PYTEST_PLUGINS="{PLUGIN_MODULE}${{PYTEST_PLUGINS:+,$PYTEST_PLUGINS}}"\n'
        'export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }'
        '-p no:cacheprovider --color=no"\n'
        f"export POLAR_PYTEST_RESULTS={shlex.quote(str(results))}\n"
    )


# --------------------------------------------------------------------------- grading


def parse_test_log(log: str, spec: SweBenchSpec) -> dict[str, str]:
    """Trusting mode: per-test status from the log, with the instance's swebench parser."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    assert spec.log_parser
    if spec.log_parser not in PARSER_REGISTRY:
        raise EvaluatorError(f"unknown log_parser {spec.log_parser!r}")
    return PARSER_REGISTRY[spec.log_parser](log, None)


def _repo_parsers() -> dict[str, Callable[..., dict[str, str]]]:
    """swebench's per-repository parsers (`MAP_REPO_TO_PARSER_*` of each language module)."""
    import importlib

    parsers: dict[str, Callable[..., dict[str, str]]] = {}
    for lang in ("python", "javascript", "c", "go", "java", "php", "ruby", "rust"):
        module = importlib.import_module(f"swebench.harness.log_parsers.{lang}")
        for name, value in vars(module).items():
            if name.startswith("MAP_REPO_TO_PARSER") and isinstance(value, dict):
                parsers.update(value)
    return parsers


def _parser_hint(spec: SweBenchSpec) -> str:
    parser = _repo_parsers().get(spec.repo)
    name = getattr(parser, "__name__", "")
    if name and name not in ("parse_log_pytest", "parse_log_pytest_v2"):
        return f"; for {spec.repo}, set log_parser to {name!r} (trusting mode)"
    return "; a test command that is not pytest needs log_parser (trusting mode)"


def grade(status: dict[str, str], spec: SweBenchSpec) -> dict[str, dict[str, list[str]]]:
    """{FAIL_TO_PASS: {success, failure}, PASS_TO_PASS: {success, failure}} as SWE-bench."""
    from swebench.harness.grading import get_eval_tests_report

    report = get_eval_tests_report(
        status, {"FAIL_TO_PASS": spec.fail_to_pass, "PASS_TO_PASS": spec.pass_to_pass}
    )
    return {k: report[k] for k in ("FAIL_TO_PASS", "PASS_TO_PASS")}


def is_resolved(tests: dict[str, dict[str, list[str]]], spec: SweBenchSpec) -> bool:
    f2p, p2p = tests["FAIL_TO_PASS"], tests["PASS_TO_PASS"]
    return (
        not f2p["failure"]
        and len(f2p["success"]) == len(spec.fail_to_pass)
        and not p2p["failure"]
        and len(p2p["success"]) == len(spec.pass_to_pass)
    )


def reported_graded_tests(status: dict[str, str], spec: SweBenchSpec) -> list[str]:
    """The FAIL_TO_PASS / PASS_TO_PASS tests the run reported at all."""
    try:
        from swebench.harness.grading import _resolve_case
    except ImportError:  # older swebench: exact ids

        def _resolve_case(case: str, sm: dict[str, str]) -> str | None:
            return case if case in sm else None

    graded = [*spec.fail_to_pass, *spec.pass_to_pass]
    return [t for t in graded if _resolve_case(t, status) is not None]


def inconsistency(code: int | None, run: PytestRun | None) -> str | None:
    """Why a run whose graded tests all passed still does not count, or None."""
    if code not in (0, 1):
        return f"every graded test passed, but the test command exited {code}"
    if run is None:
        return None
    if not run.complete:
        return "a pytest session did not finish (the test process died or was stopped)"
    if any(status not in (0, 1) for status in run.exit_statuses):
        return f"pytest ended with exit status {run.exit_statuses}"
    if code == 1 and not run.any_failure:
        return "the test command exited 1 but pytest reported no failure"
    if code == 0 and run.any_failure:
        return "the test command exited 0 although pytest reported failures"
    return None


def _pytest_config(name: str, text: str | None) -> Any:
    """The pytest section of a setup.cfg or pyproject.toml (None: the file is absent)."""
    if text is None:
        return None
    try:
        if name == "pyproject.toml":
            return tomllib.loads(text).get("tool", {}).get("pytest")
        parser = configparser.RawConfigParser()
        parser.read_string(text)
        return dict(parser["tool:pytest"]) if parser.has_section("tool:pytest") else None
    except (tomllib.TOMLDecodeError, configparser.Error, AttributeError) as exc:
        return ("unreadable", str(exc))


# --------------------------------------------------------------------------- runtime steps


class _Clock:
    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.deadline = time.monotonic() + budget_s

    def left(self, floor: float = 1.0) -> float:
        return max(floor, self.deadline - time.monotonic())


def check_workspace_command(base: str) -> str:
    """The command that exits 0 where the workspace is a git checkout holding commit `base`."""
    return (
        f"{GIT} rev-parse --is-inside-work-tree >/dev/null && "
        f"{GIT} cat-file -e {revision(base, '^{commit}')}"
    )


def read_config_command(base: str, files: Sequence[str], out: Path) -> str:
    """The command that copies each of `files` into `out` as `<i>.base` (its content at
    commit `base`, absent where it had none) and `<i>.new` (the workspace's, if any)."""
    lines = [f"rm -rf {shlex.quote(str(out))}", f"mkdir -p {shlex.quote(str(out))}"]
    for i, f in enumerate(files):
        q, dest = shlex.quote(f), shlex.quote(str(out / str(i)))
        lines.append(
            f"{GIT} show {revision(base, ':' + q)} > {dest}.base 2>/dev/null || rm -f {dest}.base"
        )
        lines.append(f"if [ -f {q} ]; then cat -- {q} > {dest}.new; fi")
    return "\n".join(lines)


def restore_files_command(base: str, files: Sequence[tuple[str, bool]]) -> str:
    """The command that puts each (path, existed at `base`) back as it was at commit `base`:
    checked out from it, or removed."""
    restore = " && ".join(
        f'{GIT} checkout "$commit" -- {shlex.quote(f)}' if existed else f"rm -f -- {shlex.quote(f)}"
        for f, existed in files
    )
    return f"{resolve_commit(base)}\n{restore}"


def reset_test_files_command(base: str, files: Sequence[str]) -> str:
    """The command that puts each of `files` back to commit `base`, or removes it where
    `base` has no such file."""
    lines = [resolve_commit(base)]
    for f in files:
        q = shlex.quote(f)
        lines.append(
            f'if {GIT} cat-file -e --end-of-options "$commit":{q} 2>/dev/null; '
            f'then {GIT} checkout "$commit" -- {q}; else rm -rf -- {q}; fi'
        )
    return "\n".join(lines)


async def _check_workspace(runtime: Runtime, handle: RuntimeHandle, spec: SweBenchSpec) -> None:
    """The evaluator's workspace is a git checkout holding `base_commit` (prepare checked it
    out, before the install); EvaluatorError where it is not."""
    check = check_workspace_command(spec.base_commit)
    code, _, log = await run_in(runtime, handle, check, "swebench-base", 60)
    if code != 0:
        raise EvaluatorError(
            f"the evaluator's workspace is not a git checkout with {spec.base_commit}: "
            f"{log.strip()[-1000:]}"
        )


async def _restore_pytest_sections(
    runtime: Runtime, handle: RuntimeHandle, files: Sequence[str]
) -> list[str]:
    """Restore (from the baseline) each setup.cfg / pyproject.toml whose pytest section the
    patch changed; the files restored."""
    candidates = [f for f in files if PurePosixPath(f).name in PYTEST_SECTION_FILES]
    if not candidates:
        return []
    base = handle.baseline or "HEAD"
    out = runtime.scratch(handle) / "pytest-config"
    await run_in(runtime, handle, read_config_command(base, candidates, out), "swebench-config", 60)

    def text(path: Path) -> str | None:
        return path.read_text(errors="replace") if path.exists() else None

    changed = []
    for i, f in enumerate(candidates):
        name = PurePosixPath(f).name
        before = _pytest_config(name, text(out / f"{i}.base"))
        after = _pytest_config(name, text(out / f"{i}.new"))
        if before != after:
            changed.append((f, (out / f"{i}.base").exists()))
    if changed:
        restore = restore_files_command(base, changed)
        code, _, log = await run_in(runtime, handle, restore, "swebench-restore", 60)
        if code != 0:
            raise EvaluatorError(f"cannot restore the pytest configuration: {log.strip()}")
    return [f"{f} (pytest section)" for f, _ in changed]


async def _reset_test_files(runtime: Runtime, handle: RuntimeHandle, spec: SweBenchSpec) -> None:
    """Put the files the test patch touches back to `base_commit`; files it creates are
    removed first."""
    files = patch_files(spec.test_patch)
    if not files:
        return
    command = reset_test_files_command(spec.base_commit, files)
    code, _, log = await run_in(runtime, handle, command, "swebench-reset-tests", 120)
    if code != 0:
        raise EvaluatorError(f"cannot reset the test files: {log.strip()}")


# --------------------------------------------------------------------------- the evaluator


async def evaluate_swebench(
    session_runtime: Runtime,
    session_handle: RuntimeHandle,
    eval_runtime: Runtime,
    eval_handle: RuntimeHandle,
    spec: SweBenchSpec,
    *,
    timeout_s: float,
    protected: Sequence[str] = (),
    on_tick: Tick = None,
) -> SweEvaluation:
    """Grade the session's workspace in the (fresh, prepared) evaluator runtime; the
    non-retryable EvaluatorError for a `base_commit` git would read as an option."""
    checked_base_commit(spec.base_commit)
    clock = _Clock(timeout_s)
    started = time.monotonic()
    report = SweBenchReport(
        instance_id=spec.instance_id,
        results_from=f"log parser {spec.log_parser}" if spec.log_parser else "pytest plugin",
    )
    result = SweEvaluation(0.0, "", report=report)

    def done(detail: str) -> SweEvaluation:
        report.duration_s = round(time.monotonic() - started, 3)
        result.detail = detail
        return result

    try:
        await _check_workspace(eval_runtime, eval_handle, spec)
        changes = await carry_changes(
            session_runtime,
            session_handle,
            spec.base_commit,
            eval_runtime,
            eval_handle,
            protected=protected_paths(spec, protected),
            exclude=spec.exclude,
            timeout_s=clock.left(),
            on_tick=on_tick,
        )
        result.patch = changes.patch
        changes.fill(report)
        if changes.extract_error is not None:
            return done(
                "the session's changes could not be read from its workspace (was its git "
                f"removed or broken?): {changes.extract_error[:300]}"
            )
        if changes.empty:
            report.empty_patch = True
            kept = changes.protected_dropped
            why = f" (changes to protected files dropped: {_names(kept)})" if kept else ""
            return done(f"empty patch: the session changed nothing (junk aside){why}")
        if changes.strategy is None:
            report.apply_log = changes.attempts[-1]["log"] if changes.attempts else ""
            return done(f"patch did not apply ({len(changes.attempts)} strategies tried)")
        report.protected_files_dropped += await _restore_pytest_sections(
            eval_runtime, eval_handle, changes.files
        )

        if spec.test_patch.strip():
            await _reset_test_files(eval_runtime, eval_handle, spec)
            test_strategy, test_attempts = await apply_patch(
                eval_runtime,
                eval_handle,
                spec.test_patch.encode(),
                name="test",
                timeout_s=clock.left(),
                strategies=APPLY_STRATEGIES[:1],
                reset_to=eval_handle.baseline or "HEAD",
            )
            if test_strategy is None:
                raise EvaluatorError(f"the test patch does not apply: {test_attempts[-1]['log']}")
        return await _run_tests(eval_runtime, eval_handle, spec, clock, result, done, on_tick)
    except EvaluatorError as exc:
        report.evaluator_error = str(exc)
        return done(f"evaluator error: {str(exc)[:500]}")


async def _run_tests(
    runtime: Runtime,
    handle: RuntimeHandle,
    spec: SweBenchSpec,
    clock: _Clock,
    result: SweEvaluation,
    done: Callable[[str], SweEvaluation],
    on_tick: Tick,
) -> SweEvaluation:
    """Run the tests, kill what they left, grade what pytest (or the log parser) reported."""
    report = result.report
    command = build_test_command(spec)
    report.test_command = command
    scratch = runtime.scratch(handle)
    results_file = scratch / "pytest-results.jsonl"
    results_file.unlink(missing_ok=True)
    if not spec.log_parser:
        plugin_dir = scratch / "pytest-plugin"
        plugin_dir.mkdir(exist_ok=True)
        plugin = Path(__file__).with_name("pytest_results.py").read_bytes()
        (plugin_dir / f"{PLUGIN_MODULE}.py").write_bytes(plugin)
        command = pytest_env_prefix(plugin_dir, results_file) + command
    code, timed_out, log = await run_in(
        runtime, handle, command, "swebench-tests", clock.left(), on_tick
    )
    await reap(runtime, handle)
    result.test_log = log.encode()
    report.tests_exit_code = code

    run: PytestRun | None = None
    if spec.log_parser:
        status = parse_test_log(log, spec)
    else:
        run = read_results(results_file)
        status = run.status if run else {}
        if run is not None:
            report.collect_problems = run.collect_problems
            report.pytest_sessions = PytestSessions(
                started=run.started, finished=run.finished, exit_statuses=run.exit_statuses
            )
    tests = grade(status, spec)
    report.test_status = status
    report.fail_to_pass = TestOutcomes.model_validate(tests["FAIL_TO_PASS"])
    report.pass_to_pass = TestOutcomes.model_validate(tests["PASS_TO_PASS"])
    if timed_out:
        report.tests_timed_out = True
        return done(f"tests timed out (evaluation budget {clock.budget_s:.0f}s)")
    if run is None and not spec.log_parser:
        raise EvaluatorError(
            f"the test command never started pytest with Polar's results plugin (exit code "
            f"{code}){_parser_hint(spec)}: {log.strip()[-500:]}"
        )
    if not reported_graded_tests(status, spec):
        if run is not None and (run.collect_problems or not run.complete):
            why = _names(list(run.collect_problems)) if run.collect_problems else "none"
            return done(
                f"not resolved: the graded tests did not run (collection problems: {why}; "
                f"pytest sessions started {run.started}, finished {run.finished}; exit {code})"
            )
        if spec.log_parser and code not in (0, 1):
            return done(f"not resolved: no graded test reported, the tests exited {code}")
        shown = _names(sorted(status)) if status else "no tests at all"
        raise EvaluatorError(
            f"none of the {len(spec.fail_to_pass)} FAIL_TO_PASS / {len(spec.pass_to_pass)} "
            f"PASS_TO_PASS tests was reported by the test run (reported: {shown}); the "
            f"instance's test ids or test command do not match its tests"
            + (_parser_hint(spec) if not spec.log_parser else "")
        )
    if is_resolved(tests, spec):
        problem = inconsistency(code, run)
        if problem is not None:
            report.inconsistent = problem
            return done(f"not resolved: {problem}")
        report.resolved, report.reward = True, 1.0
        result.reward = 1.0
        return done(
            f"resolved: FAIL_TO_PASS {len(spec.fail_to_pass)}/{len(spec.fail_to_pass)}, "
            f"PASS_TO_PASS {len(spec.pass_to_pass)}/{len(spec.pass_to_pass)}"
        )
    failed = [
        f"{kind} failed: {_names(tests[kind]['failure'])}"
        for kind in ("FAIL_TO_PASS", "PASS_TO_PASS")
        if tests[kind]["failure"]
    ]
    return done("not resolved: " + ("; ".join(failed) or "graded tests skipped"))


def _names(tests: list[str], limit: int = 5) -> str:
    """Test ids for a one-line detail (the report has them all)."""
    more = f" (+{len(tests) - limit} more)" if len(tests) > limit else ""
    return ", ".join(tests[:limit]) + more


class SweBenchEvaluator:
    """`kind: swebench`: the instance's tests on the session's patch in a fresh runtime."""

    kind: ClassVar[str] = "swebench"
    needs_fresh_runtime: ClassVar[bool] = True
    needs_traces: ClassVar[bool] = False
    report_model: ClassVar[type[EvaluationReport]] = SweBenchReport

    async def evaluate(self, job: EvaluationJob) -> Evaluation:
        if job.spec.swebench is None:
            raise EvaluatorError("evaluator kind 'swebench' without its 'swebench' fields")
        eval_runtime, eval_handle = job.fresh()
        return await evaluate_swebench(
            job.session_runtime,
            job.session_handle,
            eval_runtime,
            eval_handle,
            job.spec.swebench,
            timeout_s=job.timeout_s,
            protected=job.spec.protected,
            on_tick=job.on_tick,
        )

    def logs(self, job: EvaluationJob, evaluation: Evaluation) -> dict[str, bytes]:
        """The test command's log (empty where the tests never ran)."""
        log = evaluation.test_log if isinstance(evaluation, SweEvaluation) else b""
        return {"swebench-tests.log": log}

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
4. Per-test results come from pytest itself, over a channel the code under
   test cannot name: Polar's runner (pytest_runner.py, copied into scratch
   with a per-run key) is the test process's parent; Polar's plugin
   (pytest_results.py) streams each report to it over a pipe passed by fd
   number, and the runner writes one results file signed with the key, which
   the worker verifies. pytest starts with no workspace on `sys.path` (the
   workspace goes in after pytest and the plugin are imported), and patch
   files that would shadow a module importable in the runtime are dropped.
   A `test_cmd` must therefore be a plain pytest invocation (`pytest ...`,
   `python -m pytest ...`, optionally after `NAME=value` assignments); any
   other command needs `log_parser`: its log is parsed with that swebench
   parser (the trusting mode). Grading is SWE-bench's
   `get_eval_tests_report`: reward 1 only if every FAIL_TO_PASS test passes
   and every PASS_TO_PASS test still passes, and the run is consistent
   (authentic results from a runner that made itself non-dumpable, else an
   evaluator error; one pytest session that finished with the exit status
   its process really had, exit 1 with a failure and 0 without, no tamper
   check fired).

The report (JSON) says which tests passed and failed and flags an empty
patch, a patch that did not apply, a test timeout and an evaluator error:
the instance itself is broken (its base commit or test patch, tests that
never ran pytest, none of its FAIL_TO_PASS / PASS_TO_PASS tests reported by
a clean pytest run); the activity fails the session rather than give a reward.

Residual trust: the code under test runs inside pytest's process; the
plugin's fingerprints and cross-checks catch rewrites of pytest's reporting,
but code in that process can still alter that process (docs/threat-model.md).

Every step runs through `Runtime.run` with files exchanged through
`Runtime.scratch`, so it works the same on the local and container runtimes.
"""

from __future__ import annotations

import configparser
import json
import re
import secrets
import shlex
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from activities import safe_files
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
from activities.evaluators.protected import PLUGIN_MODULE, PROTECTED
from activities.evaluators.statuses import PytestRun, verify_results
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
    "PROTECTED",
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
GRADING_DIR = "polar-grading"
"""The scratch folder of the runner, the plugin, the run's key and the signed results."""
MAX_RESULTS_BYTES = 80 << 20
PYTHON_NAME = re.compile(r"(?:.*/)?python(?:\d+(?:\.\d+)?)?")
SHELL_EXPANSION = re.compile(r"[`$\n]")
SHELL_OPERATOR = re.compile(r"[;&|<>()]+")
MODULE_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pyd")

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


def plain_pytest_argv(command: str) -> list[str] | None:
    """`command` as argv if it is a plain pytest invocation (`pytest ...`, `py.test ...`,
    `python[3] -m pytest ...`, after optional `NAME=value` assignments) with no other shell
    syntax; None otherwise (such a command needs `log_parser`)."""
    if SHELL_EXPANSION.search(command):
        return None
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        argv = list(lexer)
    except ValueError:
        return None
    if any(SHELL_OPERATOR.fullmatch(a) for a in argv):
        return None
    i = 0
    while i < len(argv) and re.fullmatch(r"[A-Za-z_]\w*=.*", argv[i], re.S):
        i += 1
    head = argv[i:]
    if head and PurePosixPath(head[0]).name in ("pytest", "py.test"):
        return argv
    if len(head) >= 3 and PYTHON_NAME.fullmatch(head[0]) and head[1:3] == ["-m", "pytest"]:
        return argv
    return None


def interpreter_argv(argv: Sequence[str]) -> list[str]:
    """The interpreter part of a plain pytest argv (what the probe runs), assignments left out."""
    head = [a for a in argv if not re.fullmatch(r"[A-Za-z_]\w*=.*", a, re.S)][:1]
    return head or ["python"]


def runner_command(folder: Path, argv: Sequence[str]) -> str:
    """The shell lines that run the plain pytest `argv` under Polar's runner (`python3 -I`)."""
    runner = shlex.quote(str(folder / "pytest_runner.py"))
    return (
        'export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }'
        '-p no:cacheprovider --color=no"\n'
        "py=$(command -v python3 || command -v python) || "
        '{ echo "polar: no python3 in the runtime for the pytest runner" >&2; exit 127; }\n'
        f'exec "$py" -I {runner} run {shlex.quote(str(folder))} -- '
        + " ".join(shlex.quote(a) for a in argv)
    )


def shadowing_files(
    added: Sequence[str], base_files: Sequence[str], importable: set[str]
) -> dict[str, str]:
    """Files the patch adds (absent at base) that would shadow an importable top-level module:
    path -> module. A file shadows where a folder on its way (the root included) is no package
    at base (no `__init__.py`: pytest may put it on sys.path) and the name right below that
    folder is importable in the runtime but is not the repository's own there at base."""
    base = set(base_files)
    inits = {str(PurePosixPath(f).parent) for f in base if PurePosixPath(f).name == "__init__.py"}
    own: dict[str, set[str]] = {}
    for f in base:
        parts = PurePosixPath(f).parts
        for depth in range(len(parts)):
            folder = "/".join(parts[:depth]) or "."
            own.setdefault(folder, set()).add(_module_name(parts[depth], depth == len(parts) - 1))
    out: dict[str, str] = {}
    for path in added:
        if path in base:
            continue
        parts = PurePosixPath(path).parts
        for depth in range(len(parts)):
            folder = "/".join(parts[:depth]) or "."
            if folder in inits:
                continue
            name = _module_name(parts[depth], depth == len(parts) - 1)
            if name and name in importable and name not in own.get(folder, set()):
                out[path] = name
                break
    return out


def _module_name(component: str, is_file: bool) -> str:
    """The module name a path component imports as ('' where it cannot be one)."""
    if not is_file:
        return component if component.isidentifier() else ""
    if not component.endswith(MODULE_SUFFIXES):
        return ""
    stem = component.split(".", 1)[0]
    return stem if stem.isidentifier() else ""


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
    if run.overflow:
        return "pytest's reports passed the size limit of the runner's channel"
    if run.returncode is not None:
        if code != run.returncode:
            return f"the test command exited {code} but pytest's process exited {run.returncode}"
        if run.started != 1 or run.finished != 1:
            return (
                f"the runner's pytest started {run.started} and finished {run.finished} "
                "sessions (one expected)"
            )
        if run.exit_statuses and run.exit_statuses[-1] != run.returncode:
            return (
                f"pytest's session ended with exit status {run.exit_statuses[-1]} but its "
                f"process exited {run.returncode}"
            )
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


def install_grading_files(runtime: Runtime, handle: RuntimeHandle) -> Path:
    """Polar's runner and plugin in the evaluator's scratch (written no-follow, fresh); the
    folder."""
    scratch = runtime.scratch(handle)
    here = Path(__file__).parent
    for name, source in (
        ("pytest_runner.py", "pytest_runner.py"),
        (f"{PLUGIN_MODULE}.py", "pytest_results.py"),
    ):
        safe_files.write_bytes(scratch, f"{GRADING_DIR}/{name}", (here / source).read_bytes())
    for stale in ("key", "results.json", "importable.json", "base-files"):
        safe_files.remove(scratch, f"{GRADING_DIR}/{stale}")
    return scratch / GRADING_DIR


@dataclass
class ModuleMap:
    """What decides which patch files shadow a module: the importable top-level names of the
    runtime's Python (outside the workspace), and the files of the workspace at base."""

    importable: set[str]
    base_files: list[str]


async def probe_modules(
    runtime: Runtime, handle: RuntimeHandle, folder: Path, argv: Sequence[str]
) -> ModuleMap:
    """List the importable modules (the test command's interpreter, run by the runner) and
    the base's files, in the evaluator's runtime before the patch is applied."""
    interp = " ".join(shlex.quote(a) for a in interpreter_argv(argv))
    runner = shlex.quote(str(folder / "pytest_runner.py"))
    files = shlex.quote(str(folder / "base-files"))
    command = (
        f"{GIT} ls-tree -r --name-only -z {revision(handle.baseline or 'HEAD')} > {files}\n"
        "py=$(command -v python3 || command -v python) || exit 127\n"
        f'"$py" -I {runner} probe {shlex.quote(str(folder))} -- {interp}'
    )
    code, _, log = await run_in(runtime, handle, command, "swebench-probe", 120)
    scratch = runtime.scratch(handle)
    names = safe_files.read_bytes(scratch, f"{GRADING_DIR}/importable.json", limit=32 << 20)
    listing = safe_files.read_bytes(scratch, f"{GRADING_DIR}/base-files", limit=256 << 20)
    for done in ("importable.json", "base-files"):  # scratch is copied in before each command
        safe_files.remove(scratch, f"{GRADING_DIR}/{done}")
    if code != 0 or names is None or listing is None:
        raise EvaluatorError(
            f"cannot list the runtime's importable modules (exit {code}): {log.strip()[-500:]}"
        )
    try:
        importable = {str(n) for n in json.loads(names)}
    except ValueError as exc:
        raise EvaluatorError(f"the module probe's output does not parse: {exc}") from exc
    base = [f for f in listing.decode("utf-8", "surrogateescape").split("\0") if f]
    return ModuleMap(importable, base)


async def _drop_shadowing(
    runtime: Runtime, handle: RuntimeHandle, files: Sequence[str], modules: ModuleMap
) -> list[str]:
    """Remove the applied patch's files that would shadow an importable module; the report's
    lines for them."""
    shadows = shadowing_files(files, modules.base_files, modules.importable)
    if not shadows:
        return []
    remove = " && ".join(f"rm -f -- {shlex.quote(f)}" for f in shadows)
    code, _, log = await run_in(runtime, handle, remove, "swebench-shadows", 60)
    if code != 0:
        raise EvaluatorError(f"cannot remove the shadowing files: {log.strip()[-500:]}")
    return [f"{f} (shadows the importable module {m!r})" for f, m in shadows.items()]


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
    control: bool = False,
) -> SweEvaluation:
    """Grade the session's workspace in the (fresh, prepared) evaluator runtime; the
    non-retryable EvaluatorError for a `base_commit` git would read as an option. A
    `control` grading runs the tests even on an empty patch."""
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
        modules: ModuleMap | None = None
        if not spec.log_parser:
            argv = plain_pytest_argv(build_test_command(spec))
            if argv is None:
                raise EvaluatorError(
                    f"test_cmd {spec.test_cmd!r} is not a plain pytest invocation (`pytest "
                    "...` or `python -m pytest ...`, after optional NAME=value assignments, no "
                    "other shell syntax): Polar's runner cannot vouch for its results; set "
                    "log_parser to grade its log (the trusting mode)"
                )
            folder = install_grading_files(eval_runtime, eval_handle)
            modules = await probe_modules(eval_runtime, eval_handle, folder, argv)
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
        unreadable = changes.extract_problem()
        if unreadable is not None:
            return done(unreadable)
        if changes.empty and not control:
            report.empty_patch = True
            kept = changes.protected_dropped
            why = f" (changes to protected files dropped: {_names(kept)})" if kept else ""
            return done(f"empty patch: the session changed nothing (junk aside){why}")
        if changes.strategy is None and not changes.empty:
            report.apply_log = changes.attempts[-1]["log"] if changes.attempts else ""
            return done(
                changes.too_large
                or f"patch did not apply ({len(changes.attempts)} strategies tried)"
            )
        report.protected_files_dropped += await _restore_pytest_sections(
            eval_runtime, eval_handle, changes.files
        )
        if modules is not None:
            report.protected_files_dropped += await _drop_shadowing(
                eval_runtime, eval_handle, changes.files, modules
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
    key_file, results_file = f"{GRADING_DIR}/key", f"{GRADING_DIR}/results.json"
    key = b""
    if not spec.log_parser:
        argv = plain_pytest_argv(command)
        assert argv is not None  # checked before the patch was applied
        key = secrets.token_hex(32).encode()
        safe_files.remove(scratch, results_file)
        safe_files.write_bytes(scratch, key_file, key, mode=0o600)
        command = runner_command(scratch / GRADING_DIR, argv)
    code, timed_out, log = await run_in(
        runtime, handle, command, "swebench-tests", clock.left(), on_tick
    )
    await reap(runtime, handle)
    result.test_log = log.encode()
    report.tests_exit_code = code

    run: PytestRun | None = None
    problem: str | None = None
    if spec.log_parser:
        status = parse_test_log(log, spec)
    else:
        if _read_or_none(scratch, key_file) is not None:  # the runner never took its key
            safe_files.remove(scratch, key_file)
            if not timed_out:
                raise EvaluatorError(
                    f"Polar's pytest runner never started (exit code {code}; is there a "
                    f"python3 in the runtime?): {log.strip()[-500:]}"
                )
        run, problem = verify_results(_read_or_none(scratch, results_file), key)
        report.results_problem = problem
        status = run.status if run else {}
        if run is not None:
            report.collect_problems = run.collect_problems
            report.pytest_sessions = PytestSessions(
                started=run.started, finished=run.finished, exit_statuses=run.exit_statuses
            )
            report.tampered = run.tampered
            report.runner_non_dumpable = run.non_dumpable
    tests = grade(status, spec)
    report.test_status = status
    report.fail_to_pass = TestOutcomes.model_validate(tests["FAIL_TO_PASS"])
    report.pass_to_pass = TestOutcomes.model_validate(tests["PASS_TO_PASS"])
    if timed_out:
        report.tests_timed_out = True
        return done(f"tests timed out (evaluation budget {clock.budget_s:.0f}s)")
    if problem is not None:
        return done(f"not resolved: the test results do not count: {problem}")
    if run is not None and run.non_dumpable is not True:
        # the code under test could have read the key from the runner's memory (/proc/PID/mem,
        # ptrace): its signed results vouch for nothing, whatever they say
        raise EvaluatorError(
            "Polar's pytest runner could not make itself non-dumpable (prctl "
            f"PR_SET_DUMPABLE: {run.non_dumpable}; no ctypes or no prctl in the runtime's "
            "python3?): the code under test could have read its key, so its results do not "
            "count"
        )
    if run is not None and run.tampered:
        report.inconsistent = f"tampered: {run.tampered[0]}"
        return done(f"not resolved: the test run was tampered with: {_names(run.tampered, 2)}")
    if run is not None and not (run.booted and run.started):
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


def _read_or_none(base: Path, relative: str) -> bytes | None:
    """A file the runner (or the code under test) may have written in scratch, no-follow; None
    where it is absent or not a plain file."""
    try:
        return safe_files.read_bytes(base, relative, limit=MAX_RESULTS_BYTES)
    except (safe_files.UnsafePath, IsADirectoryError):
        return None


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
            control=job.control,
        )

    def logs(self, job: EvaluationJob, evaluation: Evaluation) -> dict[str, bytes]:
        """The test command's log (empty where the tests never ran)."""
        log = evaluation.test_log if isinstance(evaluation, SweEvaluation) else b""
        return {"swebench-tests.log": log}

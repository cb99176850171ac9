"""The `swebench` evaluator: grade a session's patch with its instance's tests.

1. Extract the patch from the session's runtime: `git diff` of the workspace
   against `base_commit` through a temporary index (`git add -A`), so new
   files, deletions, commits the harness made and binary files are all in it;
   junk (caches, `__pycache__`, harness config folders, `node_modules`,
   `*.pyc`) is left out, both at `git add` and again on the diff.
2. Apply it in a FRESH runtime of the same source at `base_commit` (prepared
   and torn down through the runtime interface), with fallbacks: `git apply`,
   `git apply --3way`, `git apply --reject`, `patch --fuzz=5`.
3. Reset the test patch's files to `base_commit`, apply the test patch, run
   the tests (the instance's `test_cmd`, default `python -m pytest -rA` on the
   test files), parse per-test results with the `swebench` package's log
   parsers and grade them with its `get_eval_tests_report`: reward 1 only if
   every FAIL_TO_PASS test passes and every PASS_TO_PASS test still passes.

The report (JSON) says which tests passed and failed and flags an empty
patch, a patch that did not apply, a test timeout and an evaluator error
(the instance itself is broken: no git workspace, a test patch or install
that fails; the activity fails the session rather than give a reward).

Every step runs through `Runtime.run` with files exchanged through
`Runtime.scratch`, so it works the same on the local and container runtimes.
"""

from __future__ import annotations

import codecs
import contextlib
import fnmatch
import shlex
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from activities.evaluators.command import Evaluation
from activities.runtimes.base import Runtime
from polar.models import PrepareRequest, RuntimeHandle, RuntimeSpec, Source, SweBenchSpec

Tick = Callable[[float], Awaitable[None] | None] | None

DEFAULT_TEST_CMD = "python -m pytest -rA -p no:cacheprovider"

# path components that are never part of a fix
JUNK_DIRS = frozenset({
    "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".tox",
    ".nox", ".eggs", ".ipynb_checkpoints", "node_modules", ".venv", ".cache",
    ".codex", ".claude", ".qwen", ".pi", ".gemini", ".polar",
})  # fmt: skip
JUNK_FILES = ("*.pyc", "*.pyo", "*.egg-info", ".coverage", ".coverage.*", ".DS_Store")

# (name, command): tried in order until one exits 0; the workspace is reset between them
APPLY_STRATEGIES = (
    ("git apply", "git apply --verbose --whitespace=nowarn {patch}"),
    ("git apply --3way", "git apply --verbose --3way --whitespace=nowarn {patch}"),
    ("git apply --reject", "git apply --verbose --reject --whitespace=nowarn {patch}"),
    ("patch --fuzz", "patch --batch --forward --no-backup-if-mismatch --fuzz=5 -p1 -i {patch}"),
)
RESET = "git reset --quiet --hard HEAD && git clean -fdq"

# git must not read anything the harness may have left in the repo's config
GIT = (
    "git -c core.quotepath=false -c core.fsmonitor=false -c core.hooksPath=/dev/null "
    "-c diff.noprefix=false -c diff.mnemonicprefix=false -c color.ui=false"
)


class EvaluatorError(RuntimeError):
    """The instance cannot be graded (not a git workspace, test patch or install fails)."""


@dataclass
class SweEvaluation(Evaluation):
    """The outcome, its JSON report, and the files worth keeping as artifacts."""

    report: dict[str, Any] = field(default_factory=dict)
    patch: bytes = b""
    test_log: bytes = b""


# --------------------------------------------------------------------------- patches


def is_junk(path: str, extra: Sequence[str] = ()) -> bool:
    """Whether a changed path is junk (caches, harness config, build output)."""
    parts = path.strip("/").split("/")
    if any(part in JUNK_DIRS or fnmatch.fnmatch(part, "*.egg-info") for part in parts):
        return True
    name = parts[-1]
    if any(fnmatch.fnmatch(name, pattern) for pattern in JUNK_FILES):
        return True
    return any(fnmatch.fnmatch(path, pattern) for pattern in extra)


def _exclude_pathspecs(extra: Sequence[str]) -> list[str]:
    specs = [f":(exclude,glob)**/{d}/**" for d in sorted(JUNK_DIRS)]
    specs += [f":(exclude,glob)**/{p}{tail}" for p in JUNK_FILES for tail in ("", "/**")]
    specs += [f":(exclude,glob){p}" for p in extra]
    return specs


def _unquote(path: bytes) -> str:
    if path.startswith(b'"') and path.endswith(b'"'):
        raw = codecs.escape_decode(path[1:-1])[0]
        assert isinstance(raw, bytes)
        return raw.decode("utf-8", "surrogateescape")
    return path.decode("utf-8", "surrogateescape")


def _header_path(header: bytes) -> str:
    """The path of a `diff --git a/X b/X` header (renames off, so both sides agree)."""
    rest = header[len(b"diff --git ") :].rstrip(b"\r\n")
    if rest.startswith(b'"'):
        end = rest.index(b'"', 1)
        while rest[end - 1 : end] == b"\\":
            end = rest.index(b'"', end + 1)
        first = _unquote(rest[: end + 1])
    else:
        first = rest[: (len(rest) - 1) // 2].decode("utf-8", "surrogateescape")
    return first[2:] if first.startswith(("a/", "b/")) else first


def split_patch(patch: bytes) -> list[tuple[str, bytes]]:
    """A git diff split into (path, chunk) per file; text before the first file is dropped."""
    chunks: list[tuple[str, bytes]] = []
    current: list[bytes] = []
    for line in patch.splitlines(keepends=True):
        if line.startswith(b"diff --git "):
            if current:
                chunks.append((_header_path(current[0]), b"".join(current)))
            current = [line]
        elif current:
            current.append(line)
    if current:
        chunks.append((_header_path(current[0]), b"".join(current)))
    return chunks


def filter_patch(patch: bytes, extra: Sequence[str] = ()) -> tuple[bytes, list[str], list[str]]:
    """(patch without junk files, kept paths, dropped paths)."""
    kept, kept_paths, dropped = [], [], []
    for path, chunk in split_patch(patch):
        if is_junk(path, extra):
            dropped.append(path)
        else:
            kept.append(chunk)
            kept_paths.append(path)
    return b"".join(kept), kept_paths, dropped


def patch_files(patch: str) -> list[str]:
    """The paths a (text) patch touches."""
    return [path for path, _ in split_patch(patch.encode())]


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


# --------------------------------------------------------------------------- grading


def parse_test_log(log: str, spec: SweBenchSpec) -> dict[str, str]:
    """Per-test status (PASSED, FAILED, ERROR, SKIPPED, XFAIL) with swebench's parsers."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    if spec.log_parser:
        parser = PARSER_REGISTRY[spec.log_parser]
    else:
        parser = _repo_parsers().get(spec.repo, PARSER_REGISTRY["parse_log_pytest"])
    return parser(log, None)


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


# --------------------------------------------------------------------------- runtime steps


class _Clock:
    def __init__(self, budget_s: float) -> None:
        self.deadline = time.monotonic() + budget_s

    def left(self, floor: float = 1.0) -> float:
        return max(floor, self.deadline - time.monotonic())


async def _run(
    runtime: Runtime,
    handle: RuntimeHandle,
    command: str,
    log_name: str,
    timeout_s: float,
    on_tick: Tick = None,
) -> tuple[int | None, bool, str]:
    """(exit code, timed out, stdout+stderr) of one command in a runtime."""
    outcome = await runtime.run(
        handle, command, env={}, log_name=log_name, timeout_s=timeout_s, on_tick=on_tick
    )
    text = ""
    for path in runtime.log_paths(handle, log_name):
        if path.exists():
            text += path.read_text(errors="replace")
    return outcome.exit_code, outcome.timed_out, text


async def extract_patch(
    runtime: Runtime,
    handle: RuntimeHandle,
    base_commit: str,
    *,
    timeout_s: float = 300,
    exclude: Sequence[str] = (),
    on_tick: Tick = None,
) -> tuple[bytes, list[str], list[str]]:
    """(patch, files, dropped junk files): the workspace against `base_commit`, binary-safe."""
    scratch = runtime.scratch(handle)
    out, index = scratch / "swebench-model.patch", scratch / "swebench.index"
    out.unlink(missing_ok=True)
    base = shlex.quote(base_commit)
    excludes = " ".join(shlex.quote(s) for s in _exclude_pathspecs(exclude))
    command = f"""set -eu
{GIT} rev-parse --is-inside-work-tree >/dev/null
{GIT} cat-file -e {base}^{{commit}}
idx={shlex.quote(str(index))}; rm -f "$idx"
src=$({GIT} rev-parse --git-path index)
if [ -f "$src" ]; then cp "$src" "$idx"; fi
export GIT_INDEX_FILE="$idx"
[ -f "$src" ] || {GIT} read-tree {base}
{GIT} add -A -- . {excludes}
{GIT} diff --cached --binary --full-index --no-renames --no-ext-diff {base} \
  > {shlex.quote(str(out))}
rm -f "$idx"
"""
    code, timed_out, log = await _run(
        runtime, handle, command, "swebench-extract", timeout_s, on_tick
    )
    if timed_out or code != 0 or not out.exists():
        why = "timed out" if timed_out else f"exited {code}"
        raise EvaluatorError(f"extracting the patch {why}: {log.strip()[-2000:]}")
    return filter_patch(out.read_bytes(), exclude)


async def apply_patch(
    runtime: Runtime,
    handle: RuntimeHandle,
    patch: bytes,
    *,
    name: str = "model",
    timeout_s: float = 300,
    strategies: Sequence[tuple[str, str]] = APPLY_STRATEGIES,
    on_tick: Tick = None,
) -> tuple[str | None, list[dict[str, Any]]]:
    """Apply `patch` in the workspace: (strategy that worked or None, attempts)."""
    path = runtime.scratch(handle) / f"swebench-{name}.patch"
    path.write_bytes(patch)
    attempts: list[dict[str, Any]] = []
    for i, (strategy, template) in enumerate(strategies):
        if i:
            await _run(runtime, handle, RESET, f"swebench-apply-{name}-reset{i}", timeout_s)
        command = template.format(patch=shlex.quote(str(path)))
        code, timed_out, log = await _run(
            runtime, handle, command, f"swebench-apply-{name}-{i}", timeout_s, on_tick
        )
        attempts.append({"strategy": strategy, "exit_code": code, "log": log[-2000:]})
        if code == 0 and not timed_out:
            return strategy, attempts
    await _run(runtime, handle, RESET, f"swebench-apply-{name}-reset", timeout_s)
    return None, attempts


@contextlib.asynccontextmanager
async def fresh_runtime(
    runtime: Runtime, request: PrepareRequest, prewarmed: RuntimeHandle | None = None
) -> AsyncIterator[RuntimeHandle]:
    """A runtime prepared for the evaluator (or the `prewarmed` one, prepared earlier for
    `request`), torn down whatever happens."""
    handle: RuntimeHandle | None = prewarmed
    try:
        if handle is None:
            handle = await runtime.prepare(request)
        yield handle
    finally:
        await runtime.teardown(
            handle
            or RuntimeHandle(kind=runtime.kind, session_id=request.session_id, workdir="", host="")
        )


def eval_prepare_request(
    session_id: str,
    task_id: str,
    source: Source | None,
    runtime_spec: RuntimeSpec | None,
    kind: str,
) -> PrepareRequest:
    """The PrepareRequest of a session's evaluator runtime (same source, `-eval` id)."""
    spec = runtime_spec or RuntimeSpec.model_validate({"kind": kind})
    return PrepareRequest(
        session_id=f"{session_id}-eval", task_id=task_id, runtime=spec, source=source
    )


# --------------------------------------------------------------------------- the evaluator


async def evaluate_swebench(
    session_runtime: Runtime,
    session_handle: RuntimeHandle,
    eval_runtime: Runtime,
    eval_handle: RuntimeHandle,
    spec: SweBenchSpec,
    *,
    timeout_s: float,
    on_tick: Tick = None,
) -> SweEvaluation:
    """Grade the session's workspace in the (fresh, prepared) evaluator runtime."""
    clock = _Clock(timeout_s)
    started = time.monotonic()
    report: dict[str, Any] = {
        "instance_id": spec.instance_id,
        "resolved": False,
        "reward": 0.0,
        "empty_patch": False,
        "patch_applied": False,
        "patch_apply_failed": False,
        "apply_strategy": None,
        "tests_timed_out": False,
        "evaluator_error": None,
        "patch_files": [],
        "dropped_files": [],
        "patch_bytes": 0,
        "test_command": None,
        "tests_exit_code": None,
        "FAIL_TO_PASS": {"success": [], "failure": []},
        "PASS_TO_PASS": {"success": [], "failure": []},
        "test_status": {},
    }
    result = SweEvaluation(0.0, "", report=report)

    def done(detail: str) -> SweEvaluation:
        report["duration_s"] = round(time.monotonic() - started, 3)
        result.detail = detail
        return result

    try:
        patch, files, dropped = await extract_patch(
            session_runtime,
            session_handle,
            spec.base_commit,
            timeout_s=clock.left(),
            exclude=spec.exclude,
            on_tick=on_tick,
        )
        result.patch = patch
        report.update(patch_files=files, dropped_files=dropped, patch_bytes=len(patch))
        if not patch.strip():
            report["empty_patch"] = True
            return done("empty patch: the session changed nothing (junk aside)")

        head = await _run(eval_runtime, eval_handle, f"{GIT} rev-parse HEAD", "swebench-head", 60)
        if head[0] != 0:
            raise EvaluatorError(f"the evaluator workspace is not a git checkout: {head[2]}")
        if not head[2].strip().startswith(spec.base_commit):
            checkout = f"{GIT} checkout --quiet {shlex.quote(spec.base_commit)}"
            code, _, log = await _run(eval_runtime, eval_handle, checkout, "swebench-checkout", 120)
            if code != 0:
                raise EvaluatorError(f"cannot check out {spec.base_commit}: {log.strip()}")
        if spec.install:
            code, timed_out, log = await _run(
                eval_runtime, eval_handle, spec.install, "swebench-install", clock.left(), on_tick
            )
            if code != 0 or timed_out:
                raise EvaluatorError(f"install failed ({code}): {log.strip()[-2000:]}")

        strategy, attempts = await apply_patch(
            eval_runtime, eval_handle, patch, name="model", timeout_s=clock.left(), on_tick=on_tick
        )
        report["apply_attempts"] = [{k: a[k] for k in ("strategy", "exit_code")} for a in attempts]
        if strategy is None:
            report["patch_apply_failed"] = True
            report["apply_log"] = attempts[-1]["log"] if attempts else ""
            return done(f"patch did not apply ({len(attempts)} strategies tried)")
        report.update(patch_applied=True, apply_strategy=strategy)

        if spec.test_patch.strip():
            await _reset_test_files(eval_runtime, eval_handle, spec)
            test_strategy, test_attempts = await apply_patch(
                eval_runtime,
                eval_handle,
                spec.test_patch.encode(),
                name="test",
                timeout_s=clock.left(),
                strategies=APPLY_STRATEGIES[:1],
            )
            if test_strategy is None:
                raise EvaluatorError(f"the test patch does not apply: {test_attempts[-1]['log']}")

        command = build_test_command(spec)
        report["test_command"] = command
        code, timed_out, log = await _run(
            eval_runtime, eval_handle, command, "swebench-tests", clock.left(), on_tick
        )
        result.test_log = log.encode()
        report["tests_exit_code"] = code
        status = parse_test_log(log, spec)
        tests = grade(status, spec)
        report.update(test_status=status, **tests)
        if timed_out:
            report["tests_timed_out"] = True
            return done(f"tests timed out after {timeout_s:.0f}s")
        if is_resolved(tests, spec):
            report.update(resolved=True, reward=1.0)
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
        return done("not resolved: " + ("; ".join(failed) or "tests did not run"))
    except EvaluatorError as exc:
        report["evaluator_error"] = str(exc)
        return done(f"evaluator error: {str(exc)[:500]}")


def _names(tests: list[str], limit: int = 5) -> str:
    """Test ids for a one-line detail (the report has them all)."""
    more = f" (+{len(tests) - limit} more)" if len(tests) > limit else ""
    return ", ".join(tests[:limit]) + more


async def _reset_test_files(runtime: Runtime, handle: RuntimeHandle, spec: SweBenchSpec) -> None:
    """Put the files the test patch touches back to `base_commit` (the model's edits to them
    do not count); files the test patch creates are removed first."""
    files = patch_files(spec.test_patch)
    if not files:
        return
    base = shlex.quote(spec.base_commit)
    lines = []
    for f in files:
        q = shlex.quote(f)
        lines.append(
            f"if {GIT} cat-file -e {base}:{q} 2>/dev/null; then {GIT} checkout {base} -- {q}; "
            f"else rm -rf -- {q}; fi"
        )
    code, _, log = await _run(runtime, handle, "\n".join(lines), "swebench-reset-tests", 120)
    if code != 0:
        raise EvaluatorError(f"cannot reset the test files: {log.strip()}")

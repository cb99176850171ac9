"""Evaluation happens where the harness never was, and rewards are checked (issue 9).

A `command` harness attacks the grading of its own session; every session must
end with the honest reward. On the local runtime and on Docker, graded the way
the `evaluate` activity grades (tests/support/eval_runtimes.py), then through
the real Temporal stack:

* swebench (bundled task `textkit`, with its wrong fix): the harness edits the
  graded test, plants a `conftest.py`, injects a plugin through the pytest
  section of `pyproject.toml`, or makes the package print fake `PASSED <id>`
  lines at exit → not resolved. A correct fix still scores 1 where the repo's
  pytest.ini forces colour and the test command has no `-rA`.
* command: the harness rewrites the (protected) test the evaluator runs, writes
  the reward file itself (also from a background process), breaks its git;
  the evaluator's own reward file says 1000 or NaN.

On the local runtime, each attack is first shown to work where the defence is
switched off, so the tests can fail.
"""

from __future__ import annotations

import asyncio
import json
import math
import shlex
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from activities.evaluators import pytest_runner
from activities.evaluators.base import Evaluation, EvaluatorError
from activities.evaluators.command import CommandReport
from activities.evaluators.patches import drop_protected, glob_match
from activities.evaluators.protected import PROTECTED
from activities.evaluators.reward_checks import InvalidReward, check_rewards
from activities.evaluators.statuses import parse_results, verify_results
from activities.evaluators.swebench import evaluator as swebench_evaluator
from activities.evaluators.swebench import inconsistency, protected_paths, runner_command
from activities.evaluators.swebench.config import SweBenchConfig
from activities.runtimes.base import Runtime
from activities.runtimes.kinds.local import LocalRuntime
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.storage import Storage, artifact_key
from polar.tasks.spec import DirSource, EvaluatorSpec, GitSource, RuntimeSpec, Source, TaskSpec
from polar.tasks.swe import SweInstance, evaluator_fields, instance_to_task
from tests.support.eval_runtimes import (
    grade,
    prepare_eval,
    prepare_session,
    python_with_pytest,
    run_harness,
)
from tests.support.swe_tasks import load_task_builder

TEXTKIT = "polar-tasks__textkit-1"
STRIPS = "tests/test_slug.py::test_slugify_strips_separators"
COLLAPSES = "tests/test_slug.py::test_slugify_collapses_separators"

# a pytest hook that reports every test as passed
PASS_EVERYTHING = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def write(path: str, text: str) -> str:
    """Shell lines that write `text` to `path` (a harness's edit)."""
    q = shlex.quote(path)
    return f"mkdir -p \"$(dirname {q})\" && cat > {q} <<'POLAR_EOF'\n{text}POLAR_EOF\n"


def textkit_fix(variant: str) -> str:
    recipe = next(t for t in load_task_builder().TASKS if t["name"] == "textkit")
    return write("textkit/slug.py", recipe[variant]["textkit/slug.py"])


# --------------------------------------------------------------------------- pure parts


def test_protected_globs() -> None:
    for path, pattern in [
        ("conftest.py", "**/conftest.py"),
        ("a/b/conftest.py", "**/conftest.py"),
        ("x.pth", "**/*.pth"),
        ("pytest/__main__.py", "pytest/**"),
        ("tests/check.sh", "tests/**"),
        ("tests/a/b.sh", "tests/**"),
        ("src/setup.cfg", "**/setup.cfg"),
    ]:
        assert glob_match(path, pattern), (path, pattern)
    for path, pattern in [
        ("a/conftest.py.bak", "**/conftest.py"),
        ("src/pytest/x.py", "pytest/**"),
        ("testsx/check.sh", "tests/**"),
        ("a/b.sh", "*.sh"),
    ]:
        assert not glob_match(path, pattern), (path, pattern)
    spec = SweBenchConfig(
        instance_id="x",
        base_commit="abcd",
        fail_to_pass=["pkg/tests/test_a.py::test_x"],
        test_patch="diff --git a/pkg/tests/data.txt b/pkg/tests/data.txt\n",
    )
    globs = protected_paths(spec, ["docs/**"])
    assert set(PROTECTED) <= set(globs) and "docs/**" in globs
    assert {"pkg/tests/test_a.py", "pkg/tests/data.txt", "pkg/tests/__init__.py"} <= set(globs)
    assert "pkg/__init__.py" not in globs  # package code is the fix's to change
    patch = b"".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n".encode()
        for p in ("pkg/mod.py", "conftest.py", "pkg/tests/test_a.py", "x/sitecustomize.py")
    )
    kept, files, dropped = drop_protected(patch, globs)
    assert files == ["pkg/mod.py"] and kept.startswith(b"diff --git a/pkg/mod.py")
    assert dropped == ["conftest.py", "pkg/tests/test_a.py", "x/sitecustomize.py"]


def test_statuses_come_from_pytest_reports() -> None:
    lines = [
        {"event": "start", "pid": 1},
        {"event": "test", "nodeid": "t::ok", "when": "setup", "outcome": "passed"},
        {"event": "test", "nodeid": "t::ok", "when": "call", "outcome": "passed"},
        {"event": "test", "nodeid": "t::bad", "when": "call", "outcome": "failed"},
        {"event": "test", "nodeid": "t::fixture", "when": "setup", "outcome": "failed"},
        {"event": "test", "nodeid": "t::down", "when": "call", "outcome": "passed"},
        {"event": "test", "nodeid": "t::down", "when": "teardown", "outcome": "failed"},
        {"event": "test", "nodeid": "t::skip", "when": "setup", "outcome": "skipped"},
        {"event": "test", "nodeid": "t::xf", "when": "call", "outcome": "skipped", "xfail": True},
        {"event": "test", "nodeid": "t::xp", "when": "call", "outcome": "passed", "xfail": True},
        {"event": "collect", "nodeid": "u.py", "outcome": "failed", "why": "ImportError"},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\nPASSED t::bad\nnot json\n"
    run = parse_results(text)
    assert run.status == {
        "t::ok": "PASSED",
        "t::bad": "FAILED",
        "t::fixture": "ERROR",
        "t::down": "ERROR",
        "t::skip": "SKIPPED",
        "t::xf": "XFAIL",
        "t::xp": "PASSED",
    }
    assert list(run.collect_problems) == ["u.py"] and not run.complete
    assert (
        inconsistency(1, run) == "a pytest session did not finish (the test process died "
        "or was stopped)"
    )
    finished = parse_results(text + json.dumps({"event": "finish", "exitstatus": 1}))
    assert finished.complete and inconsistency(1, finished) is None
    assert "exited 0 although" in (inconsistency(0, finished) or "")
    clean = parse_results('{"event": "start"}\n{"event": "finish", "exitstatus": 0}\n')
    assert "exited 1 but pytest reported no failure" in (inconsistency(1, clean) or "")
    assert "exited 139" in (inconsistency(139, clean) or "")
    assert inconsistency(0, clean) is None
    # a later pytest session's report of the same test: the worst status stays
    again = parse_results(
        text + '{"event": "test", "nodeid": "t::bad", "when": "call", "outcome": "passed"}\n'
    )
    assert again.status["t::bad"] == "FAILED"


def test_rewards_are_finite_and_clamped() -> None:
    e = check_rewards(Evaluation(1000.0, "wrote 1000", {"a": -3.0, "b": 0.5}), (0.0, 1.0))
    assert e.reward == 1.0 and e.trace_rewards == {"a": 0.0, "b": 0.5}
    assert "reward 1000 clamped to 1" in e.detail and "1 per-trace reward(s) clamped" in e.detail
    e = check_rewards(Evaluation(-5.0, "x"), (-1.0, 2.0))
    assert e.reward == -1.0 and "[-1, 2]" in e.detail
    e = check_rewards(Evaluation(0.25, "fine", {"a": 1.0}), (0.0, 1.0))
    assert e.detail == "fine" and not e.report.rewards_clamped
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(InvalidReward, match="not finite"):
            check_rewards(Evaluation(bad, "x"), (0.0, 1.0))
        with pytest.raises(InvalidReward, match="per-trace"):
            check_rewards(Evaluation(0.0, "x", {"t1": bad}), (0.0, 1.0))
    for wrong in ((1.0, 0.0), (0.0, 0.0), (0.0, math.inf), (math.nan, 1.0)):
        with pytest.raises(ValueError, match="reward_range"):
            EvaluatorSpec(reward_range=wrong)
    assert EvaluatorSpec().reward_range == (0.0, 1.0)


def test_results_plugin_ignores_colour_output_and_fake_lines(tmp_path: Path) -> None:
    """Polar's plugin in a real pytest: a repo forcing colour, no -rA, a test that prints a
    fake PASSED line for a failing test, a failing fixture, an xfail."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "pytest.ini").write_text("[pytest]\naddopts = --color=yes\n")
    (repo / "tests" / "test_a.py").write_text(
        "import pytest\n\n\ndef test_ok():\n    pass\n\n\n"
        "def test_bad():\n    print('PASSED tests/test_a.py::test_bad')\n    assert False\n\n\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError\n\n\n"
        "def test_fixture(broken):\n    pass\n\n\n"
        "@pytest.mark.xfail\ndef test_xf():\n    assert False\n"
    )
    folder = tmp_path / "grading"
    here = Path(pytest_runner.__file__).parent
    folder.mkdir()
    (folder / "pytest_runner.py").write_bytes((here / "pytest_runner.py").read_bytes())
    (folder / "polar_pytest_results.py").write_bytes((here / "pytest_results.py").read_bytes())
    (folder / "key").write_bytes(b"k" * 64)
    script = runner_command(folder, ["python", "-m", "pytest", "-s", "tests/test_a.py"])
    proc = subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "PASSED tests/test_a.py::test_bad" in proc.stdout  # the lie is in the log
    assert not (folder / "key").exists()  # the runner took its key before pytest started
    signed = (folder / "results.json").read_bytes()
    assert verify_results(signed, b"x" * 64)[0] is None  # another run's key
    assert "not authentic" in str(verify_results(signed, b"x" * 64)[1])
    forged = signed.replace(b'returncode\\": 1', b'returncode\\": 0')  # the body edited
    assert forged != signed and verify_results(forged, b"k" * 64)[0] is None
    run, problem = verify_results(signed, b"k" * 64)
    assert run is not None and problem is None, problem
    assert run.booted and run.returncode == 1 and not run.tampered
    assert run.status == {
        "tests/test_a.py::test_ok": "PASSED",
        "tests/test_a.py::test_bad": "FAILED",
        "tests/test_a.py::test_fixture": "ERROR",
        "tests/test_a.py::test_xf": "XFAIL",
    }
    assert run.complete and run.exit_statuses == [1] and inconsistency(1, run) is None
    assert not (repo / ".pytest_cache").exists()  # -p no:cacheprovider


# --------------------------------------------------------------------------- runtimes


@pytest.fixture(scope="module")
def pytest_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return python_with_pytest(tmp_path_factory.mktemp("py"))


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.slow)])
async def rt(
    request: pytest.FixtureRequest, tmp_path: Path, pytest_bin: Path
) -> AsyncIterator[tuple[Runtime, RuntimeSpec]]:
    """A runtime and its spec: local (its Python one with pytest) or a Docker container."""
    if request.param == "local":
        yield LocalRuntime(tmp_path / "runtimes", python_dir=pytest_bin), RuntimeSpec()
        return
    from activities.runtimes.kinds.docker import DockerRuntime

    image = request.getfixturevalue("docker_image")
    spec = RuntimeSpec(kind="docker", image=image, cpus=1, memory="1g")
    yield DockerRuntime(tmp_path / "runtimes"), spec


async def _swe_session(
    rt: tuple[Runtime, RuntimeSpec],
    source: Source,
    spec: SweBenchConfig,
    script: str,
    sid: str,
    protected: list[str] | None = None,
) -> Evaluation:
    runtime, runtime_spec = rt
    session = await prepare_session(runtime, runtime_spec, source, sid)
    try:
        await run_harness(runtime, session, script)
        evaluator = EvaluatorSpec(
            kind="swebench", swebench=spec.model_dump(mode="json"), protected=protected or []
        )
        return await grade(runtime, runtime_spec, source, session, evaluator)
    finally:
        await runtime.teardown(session)


def _textkit(swe_dir: Path, instances: dict[str, SweInstance]) -> tuple[Source, SweBenchConfig]:
    inst = instances[TEXTKIT]
    source = GitSource(url=str(swe_dir / "repos" / "polar-tasks__textkit"), ref=inst.base_commit)
    return source, SweBenchConfig.model_validate(evaluator_fields(inst))


def _not_resolved(e: Evaluation, failing: list[str]) -> None:
    assert e.reward == 0.0 and not e.report.resolved, (e.detail, e.report)
    assert e.report.evaluator_error is None, e.report.evaluator_error
    assert e.report.fail_to_pass.failure == failing, e.report


@pytest.mark.slow
async def test_edited_graded_tests_are_restored(
    rt: tuple[Runtime, RuntimeSpec], swe_dir: Path, instances: dict[str, SweInstance]
) -> None:
    source, spec = _textkit(swe_dir, instances)
    inst = instances[TEXTKIT]
    fake = "".join(f"def {t.split('::')[1]}():\n    pass\n\n\n" for t in inst.PASS_TO_PASS)
    fake += "def test_slugify_collapses_separators():\n    pass\n\n\n"
    fake += "def test_slugify_strips_separators():\n    pass\n"
    script = textkit_fix("wrong") + write("tests/test_slug.py", fake)
    e = await _swe_session(rt, source, spec, script, "edit-tests")
    _not_resolved(e, [STRIPS])
    assert e.report.protected_files_dropped == ["tests/test_slug.py"]
    assert e.report.pass_to_pass.success == inst.PASS_TO_PASS


@pytest.mark.slow
async def test_planted_conftest_is_dropped(
    rt: tuple[Runtime, RuntimeSpec],
    swe_dir: Path,
    instances: dict[str, SweInstance],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source, spec = _textkit(swe_dir, instances)
    script = (
        textkit_fix("wrong")
        + write("conftest.py", PASS_EVERYTHING)
        + write("tests/conftest.py", PASS_EVERYTHING)
    )
    e = await _swe_session(rt, source, spec, script, "conftest")
    _not_resolved(e, [STRIPS])
    assert e.report.protected_files_dropped == ["conftest.py", "tests/conftest.py"]
    assert e.report.patch_files == ["textkit/slug.py"]
    if rt[1].kind != "local":
        return
    # with nothing protected the conftest runs, and the plugin's cross-check of each report
    # with its call's raw excinfo still catches it
    monkeypatch.setattr(swebench_evaluator, "protected_paths", lambda spec, extra=(): [])
    caught = await _swe_session(rt, source, spec, script, "conftest-open")
    assert caught.reward == 0.0 and caught.report.tampered, caught.detail
    assert "raised AssertionError but its report says passed" in caught.report.tampered[0]


@pytest.mark.slow
async def test_pytest_section_of_pyproject_is_restored(
    rt: tuple[Runtime, RuntimeSpec],
    swe_dir: Path,
    instances: dict[str, SweInstance],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plugin injected through pyproject.toml's pytest section (pyproject stays the fix's
    to change otherwise)."""
    source, spec = _textkit(swe_dir, instances)
    inject = (
        "sed -i 's/^testpaths = .*$/&\\naddopts = \"-p polar_evil\"/' pyproject.toml\n"
        "sed -i 's/^version = .*$/version = \"0.2.0\"/' pyproject.toml\n"
    )
    script = textkit_fix("wrong") + write("polar_evil.py", PASS_EVERYTHING) + inject
    e = await _swe_session(rt, source, spec, script, "pyproject")
    _not_resolved(e, [STRIPS])
    assert e.report.protected_files_dropped == ["pyproject.toml (pytest section)"]
    assert sorted(e.report.patch_files) == ["polar_evil.py", "pyproject.toml", "textkit/slug.py"]
    # a change outside the pytest section is the fix's own: kept
    script = textkit_fix("gold") + "sed -i 's/^version = .*$/version = \"0.2.0\"/' pyproject.toml\n"
    kept = await _swe_session(rt, source, spec, script, "pyproject-version")
    assert kept.reward == 1.0 and kept.report.protected_files_dropped == [], kept.detail
    if rt[1].kind != "local":
        return

    # the attack is real: without the restore, the same session scores 1
    async def no_restore(*args: Any) -> list[str]:
        return []

    monkeypatch.setattr(swebench_evaluator, "restore_pytest_sections", no_restore)
    fooled = await _swe_session(
        rt,
        source,
        spec,
        textkit_fix("wrong") + write("polar_evil.py", PASS_EVERYTHING) + inject,
        "pyproject-open",
    )
    # the injected plugin now runs, and the plugin's excinfo cross-check still catches it
    assert fooled.reward == 0.0 and fooled.report.tampered, fooled.detail


@pytest.mark.slow
async def test_fake_passed_lines_do_not_count(
    rt: tuple[Runtime, RuntimeSpec], swe_dir: Path, instances: dict[str, SweInstance]
) -> None:
    source, spec = _textkit(swe_dir, instances)
    liar = f"\nimport atexit\n\natexit.register(print, 'PASSED {STRIPS}\\nPASSED {COLLAPSES}')\n"
    script = textkit_fix("wrong") + f"cat >> textkit/__init__.py <<'POLAR_EOF'\n{liar}POLAR_EOF\n"
    e = await _swe_session(rt, source, spec, script, "fake-passed")
    _not_resolved(e, [STRIPS])
    assert e.report.tests_exit_code == 1
    assert f"PASSED {STRIPS}" in e.test_log.decode()  # printed, and ignored
    assert e.report.results_from == "pytest plugin"
    if rt[1].kind != "local":
        return  # the trusting mode (log_parser) believes the log: why it is not the default
    trusting = spec.model_copy(update={"log_parser": "parse_log_pytest"})
    fooled = await _swe_session(rt, source, trusting, script, "fake-passed-trusting")
    assert fooled.reward == 1.0, fooled.detail


@pytest.mark.slow
async def test_correct_fix_scores_with_colour_and_without_rA(
    rt: tuple[Runtime, RuntimeSpec],
    swe_dir: Path,
    instances: dict[str, SweInstance],
    tmp_path: Path,
) -> None:
    """A repo whose pytest.ini forces colour, a test command without -rA: the gold fix is
    resolved (both once scored 0); the log parser finds nothing there, an evaluator error."""
    inst = instances[TEXTKIT]
    repo = tmp_path / "colour-repo"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(
        [*git, "clone", "-q", str(swe_dir / "repos" / "polar-tasks__textkit"), str(repo)],
        check=True,
    )
    (repo / "pytest.ini").write_text("[pytest]\naddopts = --color=yes\npythonpath = .\n")
    subprocess.run([*git, "add", "pytest.ini"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "colour"], cwd=repo, check=True)
    base = subprocess.run(
        [*git, "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()
    source = GitSource(url=str(repo), ref=base)
    spec = SweBenchConfig.model_validate(
        {**evaluator_fields(inst), "base_commit": base, "test_cmd": "python -m pytest {test_files}"}
    )
    gold = await _swe_session(rt, source, spec, textkit_fix("gold"), "colour-gold")
    assert gold.reward == 1.0 and gold.report.resolved, (gold.detail, gold.test_log[-2000:])
    wrong = await _swe_session(rt, source, spec, textkit_fix("wrong"), "colour-wrong")
    _not_resolved(wrong, [STRIPS])
    trusting = spec.model_copy(update={"log_parser": "parse_log_pytest"})
    blind = await _swe_session(rt, source, trusting, textkit_fix("gold"), "colour-trusting")
    assert "none of the 2 FAIL_TO_PASS" in (blind.report.evaluator_error or ""), blind.detail


@pytest.mark.slow
async def test_grading_that_finds_no_graded_test_is_an_evaluator_error(
    rt: tuple[Runtime, RuntimeSpec], swe_dir: Path, instances: dict[str, SweInstance]
) -> None:
    """Never a silent 0: test ids that match nothing, a test command that is not pytest."""
    source, spec = _textkit(swe_dir, instances)
    renamed = spec.model_copy(
        update={"fail_to_pass": ["tests/test_slug.py::test_nope"], "pass_to_pass": []}
    )
    e = await _swe_session(rt, source, renamed, textkit_fix("gold"), "no-ids")
    assert "none of the 1 FAIL_TO_PASS / 0 PASS_TO_PASS" in e.report.evaluator_error, e.detail
    assert "tests/test_slug.py::test_slugify_lowercases" in e.report.evaluator_error
    not_pytest = spec.model_copy(update={"test_cmd": "true"})
    e = await _swe_session(rt, source, not_pytest, textkit_fix("gold"), "not-pytest")
    assert "is not a plain pytest invocation" in e.report.evaluator_error, e.detail
    assert "set log_parser" in e.report.evaluator_error
    # a patch that breaks the import is the session's doing: not resolved, not an error
    broken = textkit_fix("gold") + "echo 'raise ImportError(1)' >> textkit/__init__.py\n"
    e = await _swe_session(rt, source, spec, broken, "import-error")
    assert e.reward == 0.0 and e.report.evaluator_error is None, e.report
    assert "collection problems: tests/test_slug.py" in e.detail


# --------------------------------------------------------------------------- command evaluator


def _check_repo(tmp_path: Path) -> DirSource:
    """A plain folder (not a git repo): hello.txt and the task's test, tests/check.sh."""
    repo = tmp_path / "cmd-repo"
    (repo / "tests").mkdir(parents=True, exist_ok=True)
    (repo / "hello.txt").write_text("hello\n")
    (repo / "tests" / "check.sh").write_text("grep -qx fixed hello.txt\n")
    return DirSource(path=str(repo))


async def _command_session(
    rt: tuple[Runtime, RuntimeSpec],
    source: Source,
    evaluator: EvaluatorSpec,
    script: str,
    sid: str,
    *,
    prewarm: bool = False,
) -> tuple[Evaluation, bool]:
    """(evaluation, whether a reward file was in the evaluator's scratch before grading)."""
    runtime, runtime_spec = rt
    session = await prepare_session(runtime, runtime_spec, source, sid)
    try:
        assert session.baseline, "prepare left no baseline"
        eval_handle = None
        if prewarm:  # the evaluator's runtime exists while the harness runs
            eval_handle = await prepare_eval(runtime, runtime_spec, source, session, evaluator)
        await run_harness(runtime, session, script)
        planted = (
            eval_handle is not None and (runtime.scratch(eval_handle) / "reward.json").exists()
        )
        e = await grade(runtime, runtime_spec, source, session, evaluator, prewarmed=eval_handle)
        return e, planted
    finally:
        await runtime.teardown(session)


async def test_command_evaluator_grades_in_a_fresh_runtime(
    rt: tuple[Runtime, RuntimeSpec], tmp_path: Path
) -> None:
    source = _check_repo(tmp_path)
    evaluator = EvaluatorSpec(kind="command", command="sh tests/check.sh", protected=["tests/**"])
    fixed, _ = await _command_session(rt, source, evaluator, "echo fixed > hello.txt", "c-fixed")
    assert fixed.reward == 1.0, fixed.detail
    assert fixed.report.patch_files == ["hello.txt"]
    assert isinstance(fixed.report, CommandReport) and fixed.report.baselines is not None
    baselines = fixed.report.baselines  # a plain folder, prepared twice: the same commit
    assert baselines.session == baselines.eval and len(baselines.session or "") == 40
    # the harness rewrites the test the evaluator runs: the task's own copy is run
    cheat = "echo wrong > hello.txt && echo 'exit 0' > tests/check.sh"
    honest, _ = await _command_session(rt, source, evaluator, cheat, "c-cheat")
    assert honest.reward == 0.0 and honest.report.protected_files_dropped == ["tests/check.sh"]
    # with no `protected` at all, the file the command names is protected by default
    open_spec = evaluator.model_copy(update={"protected": []})
    default, _ = await _command_session(rt, source, open_spec, cheat, "c-cheat-open")
    assert default.reward == 0.0, default.detail
    assert default.report.protected_files_dropped == ["tests/check.sh"]
    # a harness that commits, moves refs and rewrites history still has its work graded
    git = "git -c user.name=h -c user.email=h@h"
    history = (
        f"echo fixed > hello.txt && {git} commit -qam x && {git} tag -f polar && "
        f"{git} update-ref refs/polar/baseline HEAD"
    )
    moved, _ = await _command_session(rt, source, evaluator, history, "c-history")
    assert moved.reward == 1.0 and moved.report.patch_files == ["hello.txt"], moved.detail
    # a harness that removes its git: its work cannot be read, reward 0, and why
    gone, _ = await _command_session(
        rt, source, evaluator, "echo fixed > hello.txt; rm -rf .git", "c-nogit"
    )
    assert gone.reward == 0.0 and "could not be read" in gone.detail
    assert gone.report.extract_error


async def test_reward_file_planted_by_the_harness_is_ignored(
    rt: tuple[Runtime, RuntimeSpec], tmp_path: Path
) -> None:
    """The harness writes a reward file where it can: its own scratch, the evaluator's
    (prewarmed) runtime's scratch on the same disk, and from a background process: none of
    it reaches the evaluator's runtime, and the reward is the command's."""
    source = _check_repo(tmp_path)
    evaluator = EvaluatorSpec(kind="command", command="sh tests/check.sh")
    plant = """echo wrong > hello.txt
for f in "$(dirname "$PWD")/scratch/reward.json" "$(dirname "$PWD")-eval/scratch/reward.json"; do
  echo '{"reward": 1000}' > "$f" 2>/dev/null || true
done
nohup sh -c 'while :; do echo "{\\"reward\\": 1000}" > "$(dirname "$PWD")-eval/scratch/reward.json"
  sleep 0.2; done' >/dev/null 2>&1 &
"""
    e, planted = await _command_session(rt, source, evaluator, plant, "c-plant", prewarm=True)
    assert e.reward == 0.0 and not e.report.reward_file, e.detail
    # the evaluator's runtime is another uid's, 0700: the write never lands (issue 21)
    assert not planted


async def test_evaluator_reward_file_is_checked_and_clamped(
    rt: tuple[Runtime, RuntimeSpec], tmp_path: Path
) -> None:
    source = _check_repo(tmp_path)
    big = 'echo \'{"reward": 1000, "trace_rewards": {"a": -3, "b": 0.5}}\' > "$POLAR_REWARD_FILE"'
    evaluator = EvaluatorSpec(kind="command", command="true", reward_command=big)
    e, _ = await _command_session(rt, source, evaluator, "true", "c-1000")
    assert e.reward == 1.0 and e.trace_rewards == {"a": 0.0, "b": 0.5}
    assert "reward 1000 clamped to 1" in e.detail
    nan = EvaluatorSpec(
        kind="command",
        command="true",
        reward_command='echo \'{"reward": NaN}\' > "$POLAR_REWARD_FILE"',
    )
    with pytest.raises(InvalidReward):
        await _command_session(rt, source, nan, "true", "c-nan")


async def test_a_reward_command_that_writes_no_reward_file_gives_no_reward(
    rt: tuple[Runtime, RuntimeSpec], tmp_path: Path
) -> None:
    """The command exits 0 and the reward_command writes nothing: an evaluator error, never
    the command's exit-code reward of 1 (which TRL once trained as its group's best)."""
    source = _check_repo(tmp_path)
    evaluator = EvaluatorSpec(kind="command", command="true", reward_command="true")
    with pytest.raises(EvaluatorError, match="wrote no reward file"):
        await _command_session(rt, source, evaluator, "true", "c-silent")


class RecordingRuntime:
    """A runtime that notes every command it is asked to run: (runtime id, log name)."""

    def __init__(self, inner: Runtime) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.runs: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def run(self, handle: Any, command: str, **kwargs: Any) -> Any:
        self.runs.append((handle.session_id, kwargs["log_name"]))
        return await self.inner.run(handle, command, **kwargs)


async def test_nothing_runs_where_the_session_or_the_graded_code_ran(
    rt: tuple[Runtime, RuntimeSpec],
    tmp_path: Path,
    swe_dir: Path,
    instances: dict[str, SweInstance],
) -> None:
    """The trusted base, listed: every command the worker has a runtime run from the
    harness's exit on. None runs in the session's runtime; in the evaluator's runtime
    nothing runs after the code under test (swebench's tests, the command evaluator's
    command); a reward_command runs in a runtime of its own, where the code under test never
    ran. (What the worker runs itself, the extraction's git, has a PATH of the worker's
    system dirs: tests/system/test_runtime_contract.py plants a git on every PATH.)"""
    inner, spec = rt
    runtime = RecordingRuntime(inner)
    reward = (
        '[ "$POLAR_COMMAND_EXIT_CODE" = 0 ] && r=1 || r=0; '
        'echo "{\\"reward\\": $r}" > "$POLAR_REWARD_FILE"'
    )
    command = EvaluatorSpec(kind="command", command="sh tests/check.sh", reward_command=reward)
    swe_source, swe_spec = _textkit(swe_dir, instances)
    cases: list[tuple[str, Source, EvaluatorSpec, str, str]] = [
        ("run-cmd", _check_repo(tmp_path), command, "echo fixed > hello.txt", "evaluate"),
        (
            "run-swe",
            swe_source,
            EvaluatorSpec(kind="swebench", swebench=swe_spec.model_dump(mode="json")),
            textkit_fix("gold"),
            "swebench-tests",
        ),
    ]
    for sid, source, evaluator, script, graded_log in cases:
        session = await prepare_session(cast(Runtime, runtime), spec, source, sid)
        try:
            await run_harness(cast(Runtime, runtime), session, script)
            exited = len(runtime.runs)
            e = await grade(cast(Runtime, runtime), spec, source, session, evaluator)
        finally:
            await inner.teardown(session)
        assert e.reward == 1.0, (sid, e.detail)
        after = runtime.runs[exited:]
        print(f"RUNS after the harness of {sid}: {after}")
        assert not [r for r in after if r[0] == sid], after  # the session's runtime: nothing
        on_eval = [log for rid, log in after if rid == f"{sid}-eval"]
        assert on_eval and on_eval[-1] == graded_log, on_eval  # the graded code ran last
        on_reward = [log for rid, log in after if rid == f"{sid}-reward"]
        if evaluator.reward_command:
            assert on_reward[-1] == "evaluate-reward", on_reward
        assert {rid for rid, _ in after} <= {f"{sid}-eval", f"{sid}-reward"}, after


# --------------------------------------------------------------------------- on the stack

POISONABLE = 'test ! -e "$POLAR_WORKSPACE/poison" && echo \'{"reward": 1}\' > "$POLAR_REWARD_FILE"'
"""A reward_command that the session's work can break (it exits 1 where `poison` is)."""


def _command_task(task_id: str, repo: DirSource, harness: str, evaluator: dict) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "source": repo.model_dump(),
            "harness": {"kind": "command", "command": harness},
            "evaluator": {"kind": "command", **evaluator},
            "timeouts": {"heartbeat_s": 20, "max_attempts": 1},
        }
    )


@pytest.mark.slow
async def test_command_sessions_on_the_stack(
    polar: PolarClient, storage: Storage, tmp_path: Path
) -> None:
    """Local sessions through Temporal: the protected test, a reward file planted from a
    background process, the evaluator's 1000 and NaN; the evaluator's runtime is prewarmed
    and the reward file is in its scratch, not the session's."""
    repo = _check_repo(tmp_path)
    check = {"command": "sh tests/check.sh", "protected": ["tests/**"]}
    plant = (
        "echo wrong > hello.txt; echo 'exit 0' > tests/check.sh; "
        'nohup sh -c \'while :; do for d in "$(dirname "$PWD")"*; do '
        'echo "{\\"reward\\": 1000}" > "$d/scratch/reward.json"; done; sleep 0.2; done\' '
        ">/dev/null 2>&1 &"
    )
    where = (
        'echo "{\\"reward\\": 1000, \\"detail\\": \\"at $POLAR_REWARD_FILE\\"}" '
        '> "$POLAR_REWARD_FILE"'
    )
    tasks = [
        _command_task("honest-plant", repo, plant, check),
        _command_task("honest-1000", repo, "true", {"command": "true", "reward_command": where}),
        # the session's own work breaks the task's reward_command: its zero, not a task error
        _command_task(
            "honest-poison",
            repo,
            "touch poison",
            {"command": "true", "reward_command": POISONABLE},
        ),
        # a reward_command that never writes its file: the task's error (the control agrees)
        _command_task("honest-silent", repo, "true", {"command": "true", "reward_command": "true"}),
        _command_task(
            "honest-nan",
            repo,
            "true",
            {
                "command": "true",
                "reward_command": 'echo \'{"reward": NaN}\' > "$POLAR_REWARD_FILE"',
            },
        ),
    ]
    runs = [await polar.submit(t) for t in tasks]
    results = await asyncio.gather(*(polar.wait(r, timeout_s=180) for r in runs))
    (plant_s,), (big_s,), (poison_s,), (silent_s,), (nan_s,) = (r.sessions for r in results)
    assert plant_s.status == SessionStatus.COMPLETED and plant_s.reward == 0.0, plant_s
    report = json.loads(storage.get_bytes(artifact_key(plant_s.session_id, "command-report.json")))
    assert report["protected_files_dropped"] == ["tests/check.sh"]
    assert report["eval_runtime"] == "prewarmed"
    assert big_s.reward == 1.0 and "clamped to 1" in (big_s.evaluation or ""), big_s
    # the reward_command ran in a runtime of its own, where the code under test never ran
    assert f"{big_s.session_id}-reward/scratch/reward-" in (big_s.evaluation or "")
    assert poison_s.status == SessionStatus.COMPLETED and poison_s.reward == 0.0, poison_s
    assert "the session's failure" in (poison_s.evaluation or ""), poison_s
    control = CommandReport.model_validate_json(
        storage.get_bytes(artifact_key(poison_s.session_id, "command-report.json"))
    ).control
    assert control is not None and control.graded and "exited 1" in control.failure, control
    assert storage.list_keys("tasks/honest-poison/control/"), "the control is kept per task"
    assert silent_s.status == SessionStatus.ERROR and silent_s.reward is None, silent_s
    assert silent_s.error and "wrote no reward file" in silent_s.error, silent_s.error
    assert "the untouched task fails to grade too" in silent_s.error
    assert nan_s.status == SessionStatus.ERROR and nan_s.reward is None, nan_s
    assert nan_s.error and "reward is not finite" in nan_s.error
    history = await polar.client.get_workflow_handle(big_s.session_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled.count("prepare_eval_runtime") == 1 and scheduled.count("teardown") == 2
    runtimes = Path(polar.settings.data_dir) / "runtimes"
    for s in (plant_s, big_s, poison_s, silent_s, nan_s):
        for suffix in ("", "-eval", "-reward", "-control"):
            assert not (runtimes / f"{s.session_id}{suffix}").exists(), suffix


async def test_swebench_attacks_on_the_stack_in_docker(
    polar: PolarClient,
    storage: Storage,
    docker_image: str,
    swe_dir: Path,
    instances: dict[str, SweInstance],
) -> None:
    """Docker sessions through Temporal: a planted conftest and fake PASSED lines with the
    wrong fix are not resolved; the gold fix is."""
    inst = instances[TEXTKIT]
    liar = f"import atexit\natexit.register(print, 'PASSED {STRIPS}')\n"
    harnesses = {
        "conftest": textkit_fix("wrong") + write("tests/conftest.py", PASS_EVERYTHING),
        "liar": textkit_fix("wrong") + f"printf '%s\\n' {shlex.quote(liar)} >> textkit/__init__.py",
        "gold": textkit_fix("gold"),
    }
    runs = {
        name: await polar.submit(
            instance_to_task(
                inst,
                harness={"kind": "command", "command": script},
                source_root=swe_dir / "repos",
                task_id=f"honest-swe-{name}",
                runtime={"kind": "docker", "image": docker_image, "cpus": 1, "memory": "1g"},
                timeouts={"evaluate_s": 180, "heartbeat_s": 20, "max_attempts": 1},
            )
        )
        for name, script in harnesses.items()
    }
    results = await asyncio.gather(*(polar.wait(r, 300) for r in runs.values()))
    sessions = {name: r.sessions[0] for name, r in zip(runs, results, strict=True)}
    for name in ("conftest", "liar"):
        s = sessions[name]
        assert s.status == SessionStatus.COMPLETED and s.reward == 0.0, s
        assert s.evaluation and STRIPS in s.evaluation
    assert sessions["gold"].reward == 1.0, sessions["gold"]
    report = json.loads(
        storage.get_bytes(artifact_key(sessions["conftest"].session_id, "swebench-report.json"))
    )
    assert report["protected_files_dropped"] == ["tests/conftest.py"]
    assert report["eval_runtime"] == "prewarmed"

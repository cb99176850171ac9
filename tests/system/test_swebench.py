"""SWE-bench-style evaluation: instances, patch extraction, apply fallbacks, grading,
and sessions on the real Temporal stack graded by the bundled tasks' own tests."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError

from activities.evaluators import InvalidKindConfig, check_evaluator, parse_report
from activities.evaluators.fresh import eval_prepare_request, fresh_runtime
from activities.evaluators.patches import apply_patch, extract_patch, filter_patch, is_junk
from activities.evaluators.swebench import SweEvaluation, build_test_command, evaluate_swebench
from activities.evaluators.swebench.config import SweBenchConfig
from activities.evaluators.swebench.report import SweBenchReport, TestOutcomes
from activities.runtimes.kinds.local import LocalRuntime
from polar.client.sdk import PolarClient
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.records import SessionStatus
from polar.storage import Storage, artifact_key
from polar.tasks.spec import DirSource, EvaluatorSpec, GitSource, RuntimeSpec
from polar.tasks.swe import (
    SweInstance,
    dump_instances,
    evaluator_fields,
    instance_to_task,
    load_instances,
)
from tests.support.eval_runtimes import python_with_pytest, run_harness
from tests.support.paths import REPO
from tests.support.polling import wait_for

EXAMPLES = REPO / "examples" / "swe" / "instances.jsonl"
IDS = ["polar-tasks__textkit-1", "polar-tasks__intervals-1", "polar-tasks__numerals-1"]


def _git(cwd: Path, *args: str) -> str:
    # the workspaces of a local runtime belong to its unprivileged user
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "safe.directory=*", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


# --------------------------------------------------------------------------- instances


def test_bundled_tasks_build_deterministically(swe_dir: Path) -> None:
    built = (swe_dir / "instances.jsonl").read_text()
    assert built == EXAMPLES.read_text(), "rebuild examples/swe/instances.jsonl"
    for line in built.splitlines():
        data = json.loads(line)
        repo = swe_dir / "repos" / data["repo"].replace("/", "__")
        assert _git(repo, "rev-parse", "HEAD").strip() == data["base_commit"]
        gold = swe_dir / "patches" / data["instance_id"] / "gold.patch"
        assert gold.read_text() == data["patch"]


def test_loader_round_trip(tmp_path: Path, instances: dict[str, SweInstance]) -> None:
    original = list(instances.values())
    assert [i.instance_id for i in original] == IDS
    for encode in (False, True):  # lists, or JSON-encoded strings as SWE-bench ships them
        path = tmp_path / f"x{encode}.jsonl"
        dump_instances(original, path, encode_lists=encode)
        if encode:
            assert isinstance(json.loads(path.read_text().splitlines()[0])["FAIL_TO_PASS"], str)
        again = load_instances(path)
        assert again == original
        assert again[0].model_extra == {"version": "0.1", "created_at": "2024-01-01T00:00:00+00:00"}
    assert load_instances(EXAMPLES, ids=["polar-tasks__numerals-1"])[0].FAIL_TO_PASS == [
        "tests/test_convert.py::test_to_roman_subtractive",
        "tests/test_convert.py::test_no_symbol_four_times",
    ]
    swegym = SweInstance.model_validate(
        {**original[0].model_dump(), "image_name": "img:1", "FAIL_TO_PASS": '["a::b"]'}
    )
    assert swegym.image == "img:1" and swegym.FAIL_TO_PASS == ["a::b"]


def test_instance_to_task(swe_dir: Path, instances: dict[str, SweInstance]) -> None:
    inst = instances["polar-tasks__textkit-1"]
    task = instance_to_task(
        inst,
        harness={"kind": "command", "command": "true"},
        num_sessions=4,
        source_root=swe_dir / "repos",
    )
    assert task.task_id == "polar-tasks__textkit-1"
    assert task.instruction == inst.problem_statement
    assert task.num_sessions == 4
    assert task.source == GitSource(
        url=str(swe_dir / "repos" / "polar-tasks__textkit"), ref=inst.base_commit
    )
    ev = task.evaluator
    assert ev.kind == "swebench" and ev.swebench is not None
    assert ev.swebench["fail_to_pass"] == inst.FAIL_TO_PASS
    assert ev.swebench["pass_to_pass"] == inst.PASS_TO_PASS
    assert ev.swebench["test_patch"] == inst.test_patch
    assert task.metadata["instance_id"] == inst.instance_id
    github = instance_to_task(
        inst.model_copy(update={"image": "swe/textkit:1"}),
        harness={"kind": "command", "command": "true"},
        runtime={"kind": "docker"},
    )
    assert github.source == GitSource(
        url="https://github.com/polar-tasks/textkit.git", ref=inst.base_commit
    )
    assert github.runtime.image == "swe/textkit:1"
    with pytest.raises(InvalidKindConfig, match="evaluator.swebench.instance_id: Field required"):
        check_evaluator(EvaluatorSpec(kind="swebench"))


def test_default_test_command() -> None:
    spec = SweBenchConfig(
        instance_id="x",
        base_commit="abcd",
        fail_to_pass=["tests/test_a.py::test_x[1]"],
        pass_to_pass=["tests/test_b.py::C::test_y", "tests/test_a.py::test_z"],
        test_patch="diff --git a/tests/test_c.py b/tests/test_c.py\n",
    )
    assert build_test_command(spec) == (
        "python -m pytest -rA -p no:cacheprovider tests/test_a.py tests/test_b.py tests/test_c.py"
    )
    custom = spec.model_copy(update={"test_cmd": "tox -e py -- {test_files} -x"})
    assert build_test_command(custom).startswith("tox -e py -- tests/test_a.py")


# --------------------------------------------------------------------------- patches


def test_filter_patch_drops_junk() -> None:
    for junk in (
        "pkg/__pycache__/m.cpython-311.pyc",
        "m.pyc",
        ".pytest_cache/v/x",
        ".codex/config.toml",
        ".claude/settings.json",
        ".qwen/settings.json",
        ".pi/agent/models.json",
        "web/node_modules/a/index.js",
        "x.egg-info/PKG-INFO",
        ".mypy_cache/3.11/x.json",
    ):
        assert is_junk(junk), junk
    for real in ("src/pi.py", "docs/claude.md", "node.js", "pkg/cache.py", "a/.pipeline"):
        assert not is_junk(real), real
    patch = (
        b"diff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n@@ -1 +1 @@\n-x\n+y\n"
        b"diff --git a/src/__pycache__/a.pyc b/src/__pycache__/a.pyc\nnew file mode 100644\n"
        b"GIT binary patch\nliteral 1\nIcmZ?l000310RR91\n\nliteral 0\nHcmV?d00001\n\n"
        b'diff --git "a/sp ace/\\303\\251.py" "b/sp ace/\\303\\251.py"\n'
        b'new file mode 100644\n--- /dev/null\n+++ "b/sp ace/\\303\\251.py"\n@@ -0,0 +1 @@\n+z\n'
        b"diff --git a/data/big.json b/data/big.json\n--- a/data/big.json\n"
    )
    kept, files, dropped = filter_patch(patch, extra=["data/*"])
    assert files == ["src/a.py", "sp ace/é.py"]
    assert dropped == ["src/__pycache__/a.pyc", "data/big.json"]
    assert b"__pycache__" not in kept and kept.startswith(b"diff --git a/src/a.py")


@pytest.fixture(scope="module")
def pytest_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return python_with_pytest(tmp_path_factory.mktemp("py"))


@pytest.fixture
async def local(tmp_path: Path, pytest_bin: Path) -> AsyncIterator[LocalRuntime]:
    """The local runtime, its `python` one with pytest (as a repository's image has it)."""
    yield LocalRuntime(tmp_path / "runtimes", python_dir=pytest_bin)


async def _prepare(runtime: LocalRuntime, sid: str, url: Path, ref: str) -> RuntimeHandle:
    return await runtime.prepare(
        PrepareRequest(
            session_id=sid,
            task_id="t",
            runtime=RuntimeSpec(),
            source=GitSource(url=str(url), ref=ref),
        )
    )


async def test_extract_patch_is_binary_safe_and_filters_junk(
    local: LocalRuntime, swe_dir: Path, instances: dict[str, SweInstance]
) -> None:
    inst = instances["polar-tasks__textkit-1"]
    handle = await _prepare(
        local, "s1", swe_dir / "repos" / "polar-tasks__textkit", inst.base_commit
    )
    ws = Path(handle.workdir)
    (ws / "textkit" / "slug.py").write_text("changed\n")
    (ws / "textkit" / "new_module.py").write_text("NEW = 1\n")  # a new, untracked file
    (ws / "logo.bin").write_bytes(bytes(range(256)) * 4)  # a binary file
    (ws / "README.md").unlink()  # a deletion
    junk_files = [
        "__pycache__/a.cpython-311.pyc",
        "textkit/__pycache__/slug.cpython-311.pyc",
        ".pytest_cache/v/cache/nodeids",
        ".codex/config.toml",
        ".claude/settings.json",
        "node_modules/left-pad/index.js",
        "textkit.egg-info/PKG-INFO",
        "stray.pyc",
    ]
    for junk in junk_files:
        (ws / junk).parent.mkdir(parents=True, exist_ok=True)
        (ws / junk).write_bytes(b"\x00junk")
    # the harness committed part of its work, and junk with it
    (ws / "tests" / "test_more.py").write_text("def test_more():\n    assert True\n")
    (ws / "build.pyc").write_bytes(b"\x00\x01")
    await run_harness(  # as the harness, in its runtime
        local,
        handle,
        "git add -f tests/test_more.py build.pyc && "
        "git -c user.name=t -c user.email=t@t commit -qm wip",
    )

    patch, files, dropped = await extract_patch(local, handle, inst.base_commit)
    assert sorted(files) == [
        "README.md",
        "logo.bin",
        "tests/test_more.py",
        "textkit/new_module.py",
        "textkit/slug.py",
    ]
    assert dropped == ["build.pyc"]  # committed junk is filtered from the diff
    assert b"GIT binary patch" in patch
    # the patch applies on a fresh checkout and reproduces the workspace, bytes included
    fresh = await _prepare(
        local, "s2", swe_dir / "repos" / "polar-tasks__textkit", inst.base_commit
    )
    strategy, _ = await apply_patch(local, fresh, patch)
    assert strategy == "git apply"
    out = Path(fresh.workdir)
    assert (out / "logo.bin").read_bytes() == bytes(range(256)) * 4
    assert (out / "textkit" / "new_module.py").read_text() == "NEW = 1\n"
    assert not (out / "README.md").exists() and not (out / ".codex").exists()
    # the session's own git state is untouched (temporary index)
    assert _git(ws, "status", "--porcelain", "--untracked-files=no").splitlines() == [
        " D README.md",
        " M textkit/slug.py",
    ]

    not_git = await local.prepare(
        PrepareRequest(
            session_id="s3",
            task_id="t",
            runtime=RuntimeSpec(),
            source=DirSource(path=str(REPO / "examples" / "swe")),
        )
    )
    from activities.evaluators.base import EvaluatorError

    with pytest.raises(EvaluatorError, match="extracting the patch"):
        await extract_patch(local, not_git, inst.base_commit)


@pytest.mark.slow
async def test_apply_fallbacks(local: LocalRuntime, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    lines = [f"line {i}\n" for i in range(1, 21)]
    (repo / "f.txt").write_text("".join(lines))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    # a patch made on a later version of the file (its blob is in the repo): only 3-way fits
    _git(repo, "checkout", "-qb", "later")
    (repo / "f.txt").write_text("".join(lines).replace("line 12\n", "line twelve\n"))
    _git(repo, "commit", "-qam", "later")
    (repo / "f.txt").write_text(
        "".join(lines).replace("line 12\n", "line twelve\n").replace("line 15\n", "line FIFTEEN\n")
    )
    three_way = _git(repo, "diff", "--full-index").encode()
    _git(repo, "checkout", "-q", "--", ".")
    _git(repo, "checkout", "-q", "main")

    # a hand-written patch whose context is slightly off and whose blob is unknown: fuzz
    fuzzy = (
        b"--- a/f.txt\n+++ b/f.txt\n@@ -9,7 +9,7 @@\n line 9\n line 10\n line X\n"
        b"-line 12\n+line twelve\n line 13\n line 14\n line 15\n"
    )
    garbage = (
        b"diff --git a/nope.txt b/nope.txt\n--- a/nope.txt\n+++ b/nope.txt\n@@ -1 +1 @@\n-a\n+b\n"
    )

    for i, (patch, expected, check) in enumerate(
        (
            (three_way, "git apply --3way", lambda t: "line FIFTEEN" in t and "line 12\n" in t),
            (fuzzy, "patch --fuzz", lambda t: "line twelve" in t),
            (garbage, None, lambda t: t == "".join(lines)),
        )
    ):
        handle = await _prepare(local, f"apply-{i}", repo, base)
        strategy, attempts = await apply_patch(local, handle, patch)
        assert strategy == expected, attempts
        ws = Path(handle.workdir)
        assert check((ws / "f.txt").read_text())
        if expected is None:  # every strategy was tried and the workspace is clean again
            assert [a["strategy"] for a in attempts] == [
                "git apply",
                "git apply --3way",
                "git apply --reject",
                "patch --fuzz",
            ]
            assert _git(ws, "status", "--porcelain") == ""
        await local.teardown(handle)


# --------------------------------------------------------------------------- grading

EXPECTED = {  # variant → (reward, failing FAIL_TO_PASS, failing PASS_TO_PASS)
    "polar-tasks__textkit-1": {
        "wrong": ["tests/test_slug.py::test_slugify_strips_separators"],
        "breaking": ["tests/test_slug.py::test_slugify_custom_separator"],
    },
    "polar-tasks__intervals-1": {
        "wrong": [
            "tests/test_touching.py::test_merge_touching",
            "tests/test_touching.py::test_merge_touching_chain",
        ],
        "breaking": ["tests/test_core.py::test_merge_disjoint"],
    },
    "polar-tasks__numerals-1": {
        "wrong": [
            "tests/test_convert.py::test_to_roman_subtractive",
            "tests/test_convert.py::test_no_symbol_four_times",
        ],
        "breaking": [
            "tests/test_convert.py::test_to_roman_rejects_out_of_range[0]",
            "tests/test_convert.py::test_to_roman_rejects_out_of_range[-1]",
        ],
    },
}


async def _grade(
    runtime: LocalRuntime,
    swe_dir: Path,
    inst: SweInstance,
    variant: str | None,
    **spec_update: object,
) -> SweEvaluation:
    """A 'session' that applied `variant`'s patch, graded in a fresh runtime."""
    source = swe_dir / "repos" / inst.repo.replace("/", "__")
    session = await _prepare(
        runtime, f"sess-{inst.instance_id}-{variant}", source, inst.base_commit
    )
    ws = Path(session.workdir)
    if variant:
        patch = swe_dir / "patches" / inst.instance_id / f"{variant}.patch"
        _git(ws, "apply", str(patch))
    # what a harness leaves behind: caches and its own config
    subprocess.run(["python", "-m", "compileall", "-q", "."], cwd=ws, check=True)
    (ws / ".pytest_cache" / "v").mkdir(parents=True)
    (ws / ".pytest_cache" / "v" / "lastfailed").write_text("{}")
    (ws / ".codex").mkdir()
    (ws / ".codex" / "config.toml").write_text("model = 'policy'\n")
    spec = SweBenchConfig.model_validate({**evaluator_fields(inst), **spec_update})
    request = eval_prepare_request(  # the instance's install runs while preparing
        session.session_id,
        "t",
        GitSource(url=str(source), ref=inst.base_commit),
        RuntimeSpec(),
        "local",
        EvaluatorSpec(kind="swebench", swebench=spec.model_dump(mode="json")),
    )
    async with fresh_runtime(runtime, request) as eval_handle:
        evaluation = await evaluate_swebench(
            runtime, session, runtime, eval_handle, spec, timeout_s=120
        )
    assert not (runtime.root / request.session_id).exists(), "evaluator runtime not torn down"
    await runtime.teardown(session)
    return evaluation


@pytest.mark.slow
@pytest.mark.parametrize("instance_id", IDS)
async def test_evaluator_grades_each_bundled_instance(
    local: LocalRuntime, swe_dir: Path, instances: dict[str, SweInstance], instance_id: str
) -> None:
    inst = instances[instance_id]

    gold = await _grade(local, swe_dir, inst, "gold")
    report = gold.report
    assert gold.reward == 1.0 and report.resolved, (gold.detail, gold.test_log.decode()[-3000:])
    assert report.fail_to_pass == TestOutcomes(success=inst.FAIL_TO_PASS, failure=[])
    assert report.pass_to_pass == TestOutcomes(success=inst.PASS_TO_PASS, failure=[])
    assert {report.test_status[t] for t in inst.FAIL_TO_PASS + inst.PASS_TO_PASS} == {"PASSED"}
    assert report.apply_strategy == "git apply"
    assert report.patch_files == [p for p in _patch_paths(inst.patch)]  # junk left out
    assert gold.detail.startswith("resolved")
    stored = json.loads(report.to_json())  # the report is JSON, under its stored names
    assert stored["FAIL_TO_PASS"]["success"] == inst.FAIL_TO_PASS and stored["resolved"]
    assert SweBenchReport.model_validate(stored) == report

    empty = await _grade(local, swe_dir, inst, None)
    assert empty.reward == 0.0 and empty.report.empty_patch
    assert "empty patch" in empty.detail

    wrong = await _grade(local, swe_dir, inst, "wrong")
    assert wrong.reward == 0.0 and not wrong.report.resolved
    assert wrong.report.fail_to_pass.failure == EXPECTED[instance_id]["wrong"]
    assert wrong.report.pass_to_pass.failure == []
    assert all(t in wrong.detail for t in EXPECTED[instance_id]["wrong"])

    breaking = await _grade(local, swe_dir, inst, "breaking")
    assert breaking.reward == 0.0
    assert breaking.report.fail_to_pass.failure == []
    assert breaking.report.pass_to_pass.failure == EXPECTED[instance_id]["breaking"]
    assert "PASS_TO_PASS failed" in breaking.detail


def _patch_paths(patch: str) -> list[str]:
    return [line.split(" b/", 1)[1] for line in patch.splitlines() if line.startswith("diff --git")]


@pytest.mark.slow
async def test_evaluator_flags_patch_apply_failure_timeout_and_errors(
    local: LocalRuntime, swe_dir: Path, instances: dict[str, SweInstance]
) -> None:
    inst = instances["polar-tasks__textkit-1"]
    # the evaluation environment drifted from base (its setup committed over the buggy line)
    drift = (
        "sed -i 's/text.lower())$/text.lower())  # drift/' textkit/slug.py && "
        "git -c user.name=x -c user.email=x@x commit -qam drift"
    )
    failed = await _grade(local, swe_dir, inst, "gold", install=drift)
    assert failed.reward == 0.0
    assert failed.report.patch_apply_failed and not failed.report.patch_applied
    assert [a.strategy for a in failed.report.apply_attempts] == [
        "git apply",
        "git apply --3way",
        "git apply --reject",
        "patch --fuzz",
    ]
    assert "did not apply" in failed.detail

    timed_out = await _grade_with_budget(local, swe_dir, inst, budget_s=4)
    assert timed_out.reward == 0.0 and timed_out.report.tests_timed_out
    assert "timed out" in timed_out.detail

    nope = "diff --git a/tests/nope.py b/tests/nope.py\n--- a/tests/nope.py\n+++ b/tests/nope.py\n"
    broken = await _grade(local, swe_dir, inst, "gold", test_patch=nope + "@@ -1 +1 @@\n-a\n+b\n")
    assert broken.reward == 0.0
    assert "test patch does not apply" in broken.report.evaluator_error
    assert broken.detail.startswith("evaluator error")


async def _grade_with_budget(
    runtime: LocalRuntime, swe_dir: Path, inst: SweInstance, budget_s: float
) -> SweEvaluation:
    source = swe_dir / "repos" / inst.repo.replace("/", "__")
    session = await _prepare(runtime, "sess-budget", source, inst.base_commit)
    _git(Path(session.workdir), "apply", str(swe_dir / "patches" / inst.instance_id / "gold.patch"))
    spec = SweBenchConfig.model_validate(
        {
            **evaluator_fields(inst),
            # not a plain pytest invocation: graded in the trusting mode (its log parsed)
            "test_cmd": "sleep 60; python -m pytest -rA {test_files}",
            "log_parser": "parse_log_pytest",
        }
    )
    request = PrepareRequest(
        session_id="sess-budget-eval",
        task_id="t",
        runtime=RuntimeSpec(),
        source=GitSource(url=str(source), ref=inst.base_commit),
    )
    async with fresh_runtime(runtime, request) as eval_handle:
        return await evaluate_swebench(
            runtime, session, runtime, eval_handle, spec, timeout_s=budget_s
        )


# --------------------------------------------------------------------------- end to end


async def test_sessions_graded_end_to_end(
    polar: PolarClient,
    storage: Storage,
    docker_image: str,
    swe_dir: Path,
    instances: dict[str, SweInstance],
) -> None:
    """Docker sessions (the image has pytest; a local runtime's Python may not)."""
    inst = instances["polar-tasks__textkit-1"]
    patches = swe_dir / "patches" / inst.instance_id

    def task(name: str, variant: str):
        patch = (patches / f"{variant}.patch").read_text()
        command = (
            f"git apply <<'POLAR_EOF'\n{patch}POLAR_EOF\n"
            "python -m pytest -q >/dev/null 2>&1; "
            "mkdir -p .codex && echo 'model = \"policy\"' > .codex/config.toml"
        )
        return instance_to_task(
            inst,
            harness={"kind": "command", "command": command},
            source_root=swe_dir / "repos",
            task_id=f"swe-e2e-{name}",
            runtime={"kind": "docker", "image": docker_image, "cpus": 1, "memory": "1g"},
            timeouts={"evaluate_s": 180, "heartbeat_s": 20},
        )

    broken = task("broken", "gold")  # an instance whose test patch does not apply
    assert broken.evaluator.swebench is not None
    broken.evaluator.swebench["test_patch"] = inst.test_patch.replace("+def test_", "+def test")
    broken.evaluator.swebench["test_patch"] += "diff --git a/nope.py b/nope.py\n--- a/nope.py\n"
    runs = [await polar.submit(task(name, name)) for name in ("gold", "wrong")]
    runs.append(await polar.submit(broken))
    gold, wrong, error = await asyncio.gather(*(polar.wait(run, timeout_s=240) for run in runs))
    (g,), (w,), (e,) = gold.sessions, wrong.sessions, error.sessions
    # an instance that cannot be graded fails the session instead of giving it a reward
    assert e.status == SessionStatus.ERROR and e.reward is None, e
    assert e.error and "test patch does not apply" in e.error
    assert "swebench-report.json" in e.error
    assert g.status == SessionStatus.COMPLETED and g.reward == 1.0, g
    assert w.status == SessionStatus.COMPLETED and w.reward == 0.0, w
    assert g.evaluation and g.evaluation.startswith("resolved")
    assert w.evaluation and "test_slugify_strips_separators" in w.evaluation

    stored = storage.get_bytes(artifact_key(g.session_id, "swebench-report.json"))
    report = json.loads(stored)
    assert report["resolved"] and report["patch_files"] == ["textkit/slug.py"]
    assert report["PASS_TO_PASS"]["success"] == inst.PASS_TO_PASS
    parsed = parse_report("swebench", stored)  # what a reader of the artifacts does
    assert isinstance(parsed, SweBenchReport) and parsed.pass_to_pass.success == inst.PASS_TO_PASS
    assert set(report) <= {f.alias or name for name, f in SweBenchReport.model_fields.items()}
    patch = storage.get_bytes(artifact_key(g.session_id, "swebench-model.patch")).decode()
    assert ".codex" not in patch and "__pycache__" not in patch
    log = storage.get_bytes(artifact_key(w.session_id, "swebench-tests.log")).decode()
    assert "FAILED tests/test_slug.py::test_slugify_strips_separators" in log
    runtimes = Path(polar.settings.data_dir) / "runtimes"
    for s in (g, w, e):  # the session's and the evaluator's runtimes are gone
        assert not (runtimes / s.session_id).exists()
        assert not (runtimes / f"{s.session_id}-eval").exists()


@pytest.mark.slow
async def test_prewarmed_eval_runtime_is_torn_down_on_cancel(
    polar: PolarClient, swe_dir: Path, instances: dict[str, SweInstance]
) -> None:
    """The evaluator's runtime, prepared (its install included) while the harness runs, goes
    on every path: here the session is cancelled mid-harness, after the prewarm finished."""
    inst = instances["polar-tasks__textkit-1"]
    spec = instance_to_task(
        inst.model_copy(update={"install": "echo installed > installed.txt"}),
        harness={"kind": "command", "command": "sleep 60"},
        source_root=swe_dir / "repos",
        task_id="swe-prewarm-cancel",
        timeouts={"heartbeat_s": 5},
    )
    run = await polar.submit(spec)
    runtimes = Path(polar.settings.data_dir) / "runtimes"
    running: list[str] = []

    async def prewarmed_while_running() -> bool:
        status = await polar.status(run)
        running[:] = [s.session_id for s in status.sessions if s.stage == "run"]
        return (
            bool(running)
            and (runtimes / f"{running[0]}-eval" / "workspace" / "installed.txt").exists()
        )

    await wait_for(
        prewarmed_while_running, 30, "the evaluator runtime prewarmed while the harness ran"
    )
    session_id = running[0]
    await polar.cancel(run)
    with pytest.raises(WorkflowFailureError):
        await polar.wait(run, timeout_s=60)
    assert not (runtimes / session_id).exists()
    assert not (runtimes / f"{session_id}-eval").exists(), "prewarmed runtime left behind"
    history = await polar.client.get_workflow_handle(session_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled.count("prepare_eval_runtime") == 1 and scheduled.count("teardown") == 2
    assert "evaluate" not in scheduled


@pytest.mark.slow
async def test_failing_install_is_an_evaluator_error(
    polar: PolarClient, swe_dir: Path, instances: dict[str, SweInstance]
) -> None:
    """The instance's install runs while preparing the evaluator's runtime (prewarm, then again
    in `evaluate`); when it fails the session ends in error, never with a reward."""
    inst = instances["polar-tasks__textkit-1"].model_copy(
        update={"install": "echo no such package >&2; exit 3"}
    )
    spec = instance_to_task(
        inst,
        harness={"kind": "command", "command": "true"},
        source_root=swe_dir / "repos",
        task_id="swe-install-fails",
        timeouts={"heartbeat_s": 10, "max_attempts": 1},
    )
    (session,) = (await polar.wait(await polar.submit(spec), timeout_s=120)).sessions
    assert session.status == SessionStatus.ERROR and session.reward is None, session
    assert session.error and "preparing the evaluator's runtime failed" in session.error
    assert "no such package" in session.error

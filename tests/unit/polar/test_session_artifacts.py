"""A session's result names what it stored: stable names by stage, whatever the attempt."""

from __future__ import annotations

from pathlib import Path

from polar import session_artifacts
from polar.contracts import EvaluateResult, HarnessResult
from polar.session_artifacts import (
    MAX_LISTED_FILES,
    evaluation_artifacts,
    harness_artifacts,
    is_folder,
)
from polar.storage import artifact_key

SID = "t-abc-s0"


def _run(attempt: int, files: list[str]) -> HarnessResult:
    log = f"harness-attempt{attempt}"
    return HarnessResult(
        status="completed",
        exit_code=0,
        duration_s=1.0,
        stdout_key=artifact_key(SID, f"{log}.stdout"),
        stderr_key=artifact_key(SID, f"{log}.stderr"),
        attempt=attempt,
        artifact_keys=[artifact_key(SID, f"{log}/{name}") for name in files],
    )


def test_the_run_is_named_by_stage_not_by_attempt() -> None:
    named = harness_artifacts(_run(3, ["artifacts/.quill/log.jsonl", "egress.jsonl"]))
    assert named == {
        "harness.stdout": artifact_key(SID, "harness-attempt3.stdout"),
        "harness.stderr": artifact_key(SID, "harness-attempt3.stderr"),
        "harness/artifacts/.quill/log.jsonl": artifact_key(
            SID, "harness-attempt3/artifacts/.quill/log.jsonl"
        ),
        "harness/egress.jsonl": artifact_key(SID, "harness-attempt3/egress.jsonl"),
    }
    assert not any(is_folder(name) for name in named)


def test_a_run_with_many_files_is_listed_as_its_folder() -> None:
    at_most = harness_artifacts(_run(1, [f"artifacts/f{i}" for i in range(MAX_LISTED_FILES)]))
    assert len(at_most) == 2 + MAX_LISTED_FILES and "harness/" not in at_most
    many = harness_artifacts(_run(1, [f"artifacts/f{i}" for i in range(MAX_LISTED_FILES + 1)]))
    assert set(many) == {"harness.stdout", "harness.stderr", "harness/"}
    assert is_folder("harness/")
    assert many["harness/"] == artifact_key(SID, "harness-attempt1/x").removesuffix("x")


def test_the_evaluation_names_its_report_patch_and_every_log() -> None:
    evaluation = EvaluateResult(
        reward=1.0,
        detail="ok",
        log_key=artifact_key(SID, "evaluate.stdout"),
        log_keys=[artifact_key(SID, "evaluate.stdout"), artifact_key(SID, "evaluate.stderr")],
        report_key=artifact_key(SID, "command-report.json"),
        patch_key=artifact_key(SID, "command-model.patch"),
    )
    assert evaluation_artifacts(evaluation) == {
        "evaluation.report": artifact_key(SID, "command-report.json"),
        "evaluation.patch": artifact_key(SID, "command-model.patch"),
        "evaluation/evaluate.stdout": artifact_key(SID, "evaluate.stdout"),
        "evaluation/evaluate.stderr": artifact_key(SID, "evaluate.stderr"),
    }


def test_an_evaluation_of_older_code_names_what_it_returned() -> None:
    """An activity of older code returned the first log only, and no patch key."""
    old = EvaluateResult(reward=0.0, detail="", log_key=artifact_key(SID, "swebench-tests.log"))
    assert evaluation_artifacts(old) == {
        "evaluation/swebench-tests.log": artifact_key(SID, "swebench-tests.log")
    }
    assert evaluation_artifacts(EvaluateResult(reward=0.0, detail="")) == {}


def test_the_docs_table_shows_every_name() -> None:
    """docs/traces.md's table of what a session stores names each name the result uses."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "traces.md").read_text()
    table = page.split("## What a session stores", 1)[1].split("\n## ", 1)[0]
    names = [
        getattr(session_artifacts, constant)
        for constant in dir(session_artifacts)
        if constant.isupper() and isinstance(getattr(session_artifacts, constant), str)
    ]
    assert len(names) == 10
    for name in names:
        assert f"`{name}" in table, name


def test_a_task_of_many_sessions_leaves_their_maps_out_of_its_result() -> None:
    """1,024 sessions with their maps come close to Temporal's 2 MB payload limit; the task's
    result then carries them without the maps (each Session's own result keeps its map)."""
    from polar.contracts import SessionResult, TaskResult
    from polar.records import SessionStatus
    from polar.session_artifacts import RESULT_BUDGET, fit_task_result

    def session(i: int) -> SessionResult:
        sid = f"task-polar__hackable-filename-only-0123456789ab-s{i}"
        folder = f"sessions/{sid}/artifacts/"
        names = (
            "harness-attempt1.stdout",
            "harness-attempt1.stderr",
            "harbor-report.json",
            "harbor-model.patch",
            "evaluate.stdout",
            "evaluate.stderr",
        )
        return SessionResult(
            session_id=sid,
            task_id="polar__hackable-filename-only",
            index=i,
            status=SessionStatus.COMPLETED,
            reward=1.0,
            harness="claude_code",
            traces_key=f"sessions/{sid}/traces/prefix_merging.jsonl",
            artifacts={n: folder + n for n in names},
        )

    few = [session(i) for i in range(8)]
    assert fit_task_result(few) == (few, False)
    many = [session(i) for i in range(1024)]
    with_maps = len(TaskResult(task_id="t", sessions=many).model_dump_json())
    kept, omitted = fit_task_result(many)
    assert omitted and all(s.artifacts == {} for s in kept) and many[0].artifacts
    without = len(TaskResult(task_id="t", sessions=kept).model_dump_json())
    assert without < RESULT_BUDGET < with_maps < 2_000_000, (without, with_maps)

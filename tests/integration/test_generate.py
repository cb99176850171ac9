"""`polar generate`: a harness over the bundled SWE-style instances, resolved sessions kept.

The end-to-end runs use a `command` harness (it applies the gold or the wrong
patch by instance and session index) on the real Temporal stack, graded by the
`swebench` evaluator. Such a harness makes no model calls, so those sessions
have no traces: the end-to-end tests check the counts and which sessions were
kept; `test_only_resolved_sessions_traces_are_written` checks, with synthetic
traces, that only kept sessions' traces reach the RL rows, the dataset and the
SFT view.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import datasets
import pytest

from app.cli import app
from polar.client import export as ex
from polar.client.generate import SUMMARY, Collector, GenerateSummary, generate, is_resolved
from polar.client.sdk import Group, PolarClient, TaskRun
from polar.contracts import SessionResult, TaskResult
from polar.records import SessionStatus, Trace, TraceProvenance
from polar.settings import get_settings
from polar.tasks.spec import HarnessSpec
from polar.tasks.swe import SweInstance
from tests.integration.test_export import polar_env

TEXTKIT, INTERVALS, NUMERALS = (
    "polar-tasks__textkit-1",
    "polar-tasks__intervals-1",
    "polar-tasks__numerals-1",
)


def harness_command(patches: Path) -> str:
    """Gold for textkit (both sessions) and numerals' session 0; wrong everywhere else."""
    return (
        'case "$POLAR_TASK_ID:$POLAR_SESSION_ID" in '
        f"{TEXTKIT}:*|{NUMERALS}:*-s0) v=gold;; *) v=wrong;; esac; "
        f'git apply "{patches}/$POLAR_TASK_ID/$v.patch"'
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
async def test_generate_keeps_resolved_sessions(
    polar: PolarClient, swe_dir: Path, instances: dict[str, SweInstance], tmp_path: Path
) -> None:
    out = tmp_path / "gen"
    seen: list[tuple[int, int, int]] = []
    summary = await generate(
        polar,
        list(instances.values()),
        harness=HarnessSpec(kind="command", command=harness_command(swe_dir / "patches")),
        sessions_per_instance=2,
        source_root=swe_dir / "repos",
        out=out,
        concurrency=2,
        timeouts={"evaluate_s": 180, "heartbeat_s": 20},
        task_timeout_s=300,
        on_progress=lambda s: seen.append((s.instances_done, s.attempted, s.resolved)),
    )
    assert (summary.instances, summary.instances_done) == (3, 3)
    assert (summary.attempted, summary.resolved, summary.failed, summary.errored) == (6, 3, 3, 0)
    assert summary.acceptance_rate == 0.5 and summary.resolved_instances == 2
    assert not summary.task_errors
    per_repo = {repo: c.as_dict() for repo, c in summary.per_repo.items()}
    assert {r: (c["attempted"], c["resolved"], c["failed"]) for r, c in per_repo.items()} == {
        "polar-tasks/textkit": (2, 2, 0),
        "polar-tasks/numerals": (2, 1, 1),
        "polar-tasks/intervals": (2, 0, 2),
    }
    assert per_repo["polar-tasks/numerals"]["acceptance_rate"] == 0.5
    kept = sorted((k["instance_id"], k["session_id"][-3:]) for k in summary.kept_sessions)
    assert kept == [(NUMERALS, "-s0"), (TEXTKIT, "-s0"), (TEXTKIT, "-s1")]
    assert all(k["reward"] == 1.0 for k in summary.kept_sessions)
    # progress: once at the start, then after each task, monotonically
    assert seen[0] == (0, 0, 0) and seen[-1] == (3, 6, 3) and len(seen) == 4
    assert seen == sorted(seen)

    # files reload; the summary file is the summary
    on_disk = json.loads((out / SUMMARY).read_text())
    assert on_disk == json.loads(json.dumps(summary.as_dict()))
    assert on_disk["acceptance_rate"] == 0.5
    assert on_disk["per_repo"]["polar-tasks/textkit"]["acceptance_rate"] == 1.0
    manifest = json.loads((out / ex.MANIFEST).read_text())
    kept_ids = {k["session_id"] for k in summary.kept_sessions}
    assert set(manifest["source"]["sessions"]) == kept_ids and manifest["source"]["generated"]
    assert manifest["sessions"] == 3  # the kept sessions only
    # a command harness calls no model: no traces, and the files are valid and empty
    assert (summary.traces, summary.rl_rows, summary.sft_rows) == (0, 0, 0)
    assert read_jsonl(out / ex.RL_JSONL) == [] and read_jsonl(out / ex.SFT_JSONL) == []
    assert len(datasets.load_from_disk(str(out / ex.HF_DIR))) == 0
    # the evaluator really graded them: a kept session's report says resolved
    for k in summary.kept_sessions:
        result = await polar.wait(k["workflow_id"])
        (session,) = [s for s in result.sessions if s.session_id == k["session_id"]]
        assert session.evaluation and session.evaluation.startswith("resolved")


def invoke(args: list[str], env: dict[str, str]) -> Any:
    from typer.testing import CliRunner

    try:
        return CliRunner().invoke(app, args, env=env, catch_exceptions=False)
    finally:
        get_settings.cache_clear()


@pytest.mark.slow
async def test_cli_generate(polar: PolarClient, swe_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli-gen"
    env = polar_env(polar.settings)
    dataset = swe_dir / "instances.jsonl"  # its sibling repos/ is the default source root
    args = [
        "generate",
        str(dataset),
        "--harness",
        "command",
        "--command",
        harness_command(swe_dir / "patches"),
        "--id",
        TEXTKIT,
        "--id",
        INTERVALS,
        "--sessions",
        "1",
        "--concurrency",
        "2",
        "--out",
        str(out),
        "--task-timeout",
        "300",
    ]
    result = await asyncio.to_thread(invoke, args, env)
    assert result.exit_code == 0, result.output
    assert "attempted 2, resolved 1, acceptance rate 50.0%" in result.output
    assert "polar-tasks/textkit" in result.output and "polar-tasks/intervals" in result.output
    summary = json.loads((out / SUMMARY).read_text())
    assert (summary["attempted"], summary["resolved"], summary["instances"]) == (2, 1, 2)
    assert [k["instance_id"] for k in summary["kept_sessions"]] == [TEXTKIT]
    assert summary["dataset"] == str(dataset)

    limited = await asyncio.to_thread(
        invoke, [*args[:4], "--command", "true", "--limit", "1", "--out", str(tmp_path / "l")], env
    )
    assert limited.exit_code == 0, limited.output
    assert "attempted 1, resolved 0" in limited.output  # an empty patch resolves nothing

    bad = [
        ["generate", str(tmp_path / "missing.jsonl"), "--command", "true"],
        ["generate", str(dataset), "--harness", "command"],  # no --command
        ["generate", str(dataset), "--harness", "nope", "--command", "true"],
        ["generate", str(dataset), "--command", "true", "--id", "no-such-instance"],
    ]
    for argv in bad:
        assert (await asyncio.to_thread(invoke, argv, env)).exit_code == 2, argv


# --------------------------------------------------------------------------- kept traces


def _trace(session_id: str, n: int, reward: float | None, status: SessionStatus) -> Trace:
    return Trace(
        trace_id=f"{session_id}-t{n}",
        prompt_ids=[1, 2, 3],
        response_ids=[4, 5],
        loss_mask=[1, 1],
        response_logprobs=[-0.5, -0.25],
        prompt_messages=[{"role": "user", "content": f"fix it ({session_id})"}],
        response_message={"role": "assistant", "content": f"done {n}"},
        reward=reward,
        status=status,
        provenance=TraceProvenance(
            session_id=session_id,
            task_id="t",
            harness="command",
            builder="per_request",
            model="policy",
            completion_seqs=[n],
            record_ids=[f"r{n}"],
        ),
    )


def test_only_resolved_sessions_traces_are_written(
    instances: dict[str, SweInstance], tmp_path: Path
) -> None:
    cases = [  # session, status, reward
        ("ok", SessionStatus.COMPLETED, 1.0),
        ("wrong", SessionStatus.COMPLETED, 0.0),
        ("crashed", SessionStatus.HARNESS_FAILED, 1.0),  # graded, but not a clean session
        ("broken", SessionStatus.ERROR, None),
    ]
    sessions = [
        SessionResult(session_id=s, task_id="t", index=i, status=st, reward=r, harness="command")
        for i, (s, st, r) in enumerate(cases)
    ]
    assert [is_resolved(s) for s in sessions] == [True, False, False, False]
    inst = instances[TEXTKIT]
    summary = GenerateSummary(
        out=str(tmp_path), harness="command", model="policy", sessions_per_instance=4, instances=2
    )
    collector = Collector(summary)
    traces = [_trace(s, n, r, st) for s, st, r in cases for n in (1, 2)]
    collector.add(
        inst,
        Group(TaskRun("t", "wf-1"), TaskResult(task_id="t", sessions=sessions), traces=traces),
        4,
    )
    collector.add(instances[NUMERALS], Group(TaskRun("u", "wf-2"), None, error="boom"), 4)
    assert (summary.attempted, summary.resolved, summary.failed, summary.errored) == (8, 1, 2, 5)
    error = {"instance_id": NUMERALS, "workflow_id": "wf-2", "error": "boom"}
    assert summary.task_errors == [error]
    assert [t.trace_id for t in collector.traces] == ["ok-t1", "ok-t2"]

    exported = ex.export_traces(collector.traces, tmp_path, rewards=collector.rewards)
    rows = read_jsonl(tmp_path / ex.RL_JSONL)
    assert {r["session_id"] for r in rows} == {"ok"} and len(rows) == 2
    assert rows[0]["input_ids"] == [1, 2, 3, 4, 5] and rows[0]["loss_mask"] == [1, 1]
    hf = datasets.load_from_disk(str(tmp_path / ex.HF_DIR))
    assert set(hf["session_id"]) == {"ok"}
    sft = read_jsonl(tmp_path / ex.SFT_JSONL)
    assert [r["messages"][-1]["content"] for r in sft] == ["done 1", "done 2"]
    assert exported.resolved_sessions == 1


@pytest.mark.parametrize("concurrency", [0, -1])
async def test_generate_rejects_bad_concurrency(concurrency: int, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        await generate(
            None,  # type: ignore[arg-type]
            [],
            harness={"kind": "command", "command": "true"},
            out=tmp_path,
            concurrency=concurrency,
        )

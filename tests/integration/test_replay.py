"""Replaying workflow histories against today's code (Temporal's Replayer).

Stored histories in tests/histories/ are runs of earlier code: if a change to
the workflows would break sessions already running, replaying them fails here.
Set POLAR_RECORD_HISTORIES=1 to refresh them from a fresh run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polar.client.sdk import PolarClient, TaskRun
from polar.records import SessionStatus
from polar.tasks.spec import TaskSpec
from tests.integration.reordered_session import ReorderedSession
from tests.support.paths import HISTORIES
from workflows import replay as rp

HISTORIES = HISTORIES


@pytest.fixture(scope="module")
async def finished(polar: PolarClient, tmp_path_factory: pytest.TempPathFactory) -> TaskRun:
    repo = tmp_path_factory.mktemp("replay-repo")
    (repo / "README").write_text("replay\n")
    spec = TaskSpec.model_validate(
        {
            "task_id": "replay",
            "num_sessions": 2,
            "source": {"type": "dir", "path": str(repo)},
            "harness": {"command": "echo done > out.txt"},
            "evaluator": {"kind": "command", "command": "test -f out.txt"},
        }
    )
    run = await polar.submit(spec)
    result = await polar.wait(run, timeout_s=120)
    assert {s.status for s in result.sessions} == {SessionStatus.COMPLETED}
    return run


async def _histories(polar: PolarClient, run: TaskRun) -> list:
    ids = [run.workflow_id] + [s.session_id for s in (await polar.status(run)).sessions]
    return [await rp.fetch_history(polar.client, wid) for wid in ids]


async def test_fresh_histories_replay_deterministically(
    polar: PolarClient, finished: TaskRun
) -> None:
    histories = await _histories(polar, finished)
    assert len(histories) == 3
    for history in histories:
        report = await rp.replay(history)
        assert report.ok, report.explanation
    if os.environ.get("POLAR_RECORD_HISTORIES"):
        HISTORIES.mkdir(exist_ok=True)
        for history in histories[:2]:  # the task and one session
            kind = history.events[0].workflow_execution_started_event_attributes.workflow_type
            rp.save_history(history, HISTORIES / f"{kind.name.lower()}.json")


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_stored_histories_replay_against_todays_code(path: Path) -> None:
    report = await rp.replay(rp.load_history(path))
    assert report.ok, report.explanation


def test_stored_histories_exist() -> None:
    assert {p.stem for p in HISTORIES.glob("*.json")} >= {"rollouttask", "session"}


async def test_non_deterministic_change_is_caught_and_explained(
    polar: PolarClient, finished: TaskRun
) -> None:
    session_history = (await _histories(polar, finished))[1]
    report = await rp.replay(session_history, workflows=[ReorderedSession])
    assert not report.ok
    assert "Nondeterminism" in report.explanation or "nondetermin" in report.explanation.lower()
    assert "workflow.patched()" in report.explanation

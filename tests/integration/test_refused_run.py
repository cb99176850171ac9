"""A task the worker refuses at its run stage (a CLI harness without an instruction, sent
through the SDK, which cannot check the harness kinds): the session ends `task_error` naming
the field, and nothing is built or graded after it (no harness ran, nothing was recorded)."""

from __future__ import annotations

from pathlib import Path

from polar.client.sdk import PolarClient
from polar.records import OutcomeClass, SessionStatus
from polar.tasks.spec import TaskSpec
from tests.support.faults import activity_runs


async def test_a_run_refused_as_the_tasks_fault_is_neither_built_nor_graded(
    polar: PolarClient, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "README").write_text("nothing here\n")
    spec = TaskSpec.model_validate(
        {
            "task_id": "refused-run",
            "source": {"type": "dir", "path": str(source)},
            "runtime": {"kind": "local"},
            "harness": {"kind": "codex"},
            "evaluator": {"kind": "command", "command": "true"},
        }
    )
    result = await polar.wait(await polar.submit(spec), timeout_s=300)
    (session,) = result.sessions
    assert session.status == SessionStatus.ERROR, session
    assert session.outcome is not None and session.outcome.outcome == OutcomeClass.TASK_ERROR
    assert "instruction" in (session.error or ""), session.error
    ran = [r.activity for r in await activity_runs(polar.client, session.session_id)]
    assert "run_harness" in ran, ran
    assert not {"build_trajectory", "evaluate", "score"} & set(ran), ran

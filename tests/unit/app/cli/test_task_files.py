"""`--workflow-id` (app/cli/task_files.py): a valid id for one task, else exit 2."""

from __future__ import annotations

import pytest
import typer

from app.cli.task_files import checked_workflow_id_option


def test_a_valid_id_for_one_task_passes() -> None:
    assert checked_workflow_id_option("my-run-1", 1) == "my-run-1"


@pytest.mark.parametrize(("workflow_id", "tasks"), [("../../etc/passwd", 1), ("my-run-1", 2)])
def test_otherwise_exit_2(workflow_id: str, tasks: int, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(typer.Exit) as refused:
        checked_workflow_id_option(workflow_id, tasks)
    assert refused.value.exit_code == 2
    assert "--workflow-id" in capsys.readouterr().err

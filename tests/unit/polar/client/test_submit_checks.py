"""What is checked of a task before it is started (polar/client/submit_checks.py)."""

from __future__ import annotations

from typing import Any

import pytest

from polar.client.submit_checks import checked_workflow_id, missing_source
from polar.ids import InvalidId
from polar.tasks.spec import TaskSpec


def task(**fields: Any) -> TaskSpec:
    return TaskSpec.model_validate(
        {"task_id": "t", "harness": {"kind": "command", "command": "true"}} | fields
    )


def test_a_missing_source_warns_where_the_workspace_would_be_empty() -> None:
    note = missing_source(task())
    assert note is not None and "task t names no source" in note and '"source": null' in note
    assert missing_source(task(runtime={"kind": "local"})) is not None
    # said explicitly, given, or an image of the task's own that holds its workspace
    assert missing_source(task(source=None)) is None
    assert missing_source(task(source={"type": "dir", "path": "/srv/repo"})) is None
    assert missing_source(task(runtime={"kind": "docker", "image": "swe/astropy:1"})) is None
    # a spec the model wrote out says `"source": null`
    assert missing_source(TaskSpec.model_validate_json(task().model_dump_json())) is None


@pytest.mark.parametrize(
    "bad", ["../../etc/passwd", "a/b", "..", ".hidden", "-x", "", "a" * 201, "a..b", "x y"]
)
def test_a_workflow_id_has_the_id_grammar(bad: str) -> None:
    with pytest.raises(InvalidId, match="invalid workflow id"):
        checked_workflow_id(bad)


def test_real_workflow_ids_pass() -> None:
    for good in ("task-demo-1a2b3c4d", "demo-haiku-0-s1", "a", "A.b_c-9"):
        assert checked_workflow_id(good) == good

"""Workflow code never changes under the stored histories unguarded.

Until the first release, a change to workflow code re-records tests/histories/
(POLAR_RECORD_HISTORIES=1 over the recording tests, which also writes the fingerprint);
from then on it comes behind a new `workflow.patched` id (docs/testing.md, "Workflow changes").
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support import workflow_fingerprint as fp
from tests.support.paths import REPO


def test_workflow_code_changes_come_with_a_patch_or_new_histories() -> None:
    now, then = fp.current(), fp.stored()
    if now["workflow_code"] == then["workflow_code"]:
        return
    added = set(now["patches"]) - set(then["patches"])  # type: ignore[arg-type]
    assert added, (
        "workflow code changed since tests/histories/ were recorded, and no new "
        "workflow.patched id guards the change: guard it (after the first release), or "
        "re-record the histories before it: POLAR_RECORD_HISTORIES=1 .venv/bin/pytest "
        "tests/integration/test_replay.py tests/integration/test_fan_out.py "
        "tests/integration/test_task_control.py tests/integration/test_session_stages.py "
        "tests/system/test_stages.py (docs/testing.md, Workflow changes)"
    )


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "workflows", tmp_path / "workflows")
    return tmp_path


def test_the_fingerprint_sees_code_and_not_comments_or_docstrings(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    session = root / "workflows" / "session.py"
    before = fp.code_hash(root)
    text = session.read_text()
    reworded = text.replace('"""The Session workflow', '"""The Session workflow, reworded', 1)
    assert reworded != text
    session.write_text(reworded)
    session.write_text(session.read_text() + "\n# a comment\n")
    assert fp.code_hash(root) == before
    changed = text.replace("if build.num_traces:", "if not build.num_traces:", 1)
    assert changed != text
    session.write_text(changed)
    assert fp.code_hash(root) != before


def test_patch_ids_are_found(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    session = root / "workflows" / "session.py"
    session.write_text(
        session.read_text() + '\n\ndef _x() -> bool:\n    return workflow.patched("new-path")\n'
    )
    assert "new-path" in fp.patch_ids(root)


def test_every_module_that_runs_in_workflows_is_fingerprinted() -> None:
    """A new workflows/ module (placement.py and stage_calls.py came this way) is workflow
    code too; only replay.py, the tool that checks them, stays out."""
    modules = {p.name for p in (REPO / "workflows").glob("*.py")} - {"__init__.py", "replay.py"}
    assert modules == set(fp.WORKFLOW_MODULES)

"""The workflow code's fingerprint, held against the one stored with tests/histories/.

A change to workflow code must either be guarded by a new `workflow.patched` id or come with
re-recorded histories (POLAR_RECORD_HISTORIES=1): `tests/unit/workflows/test_fingerprint.py`
fails otherwise. The fingerprint is a hash of each workflow module's syntax tree, docstrings
left out (comments, formatting and docs change nothing), plus the patch ids the code names.
Recording histories writes it (`write`, from the suite's session finish).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path

from tests.support.paths import HISTORIES, REPO

WORKFLOW_MODULES = (
    "inputs.py",
    "placement.py",
    "queues.py",
    "rollout_task.py",
    "session.py",
    "session_steps.py",
    "stage_calls.py",
    "stages.py",
    "web_ui.py",
)
"""The modules whose code runs inside workflows (replay.py is the tool that checks them)."""
FINGERPRINT = HISTORIES / "workflow-code.fingerprint"
"""JSON, beside the histories (not `*.json`: those are the histories replayed)."""
PATCH_CALL = re.compile(r"workflow\.(?:patched|deprecate_patch)\(\s*([A-Za-z_][\w.]*|\"[^\"]+\")")


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return tree


def code_hash(root: Path = REPO) -> str:
    digest = hashlib.sha256()
    for name in WORKFLOW_MODULES:
        tree = _without_docstrings(ast.parse((root / "workflows" / name).read_text()))
        digest.update(name.encode() + b"\0" + ast.dump(tree).encode() + b"\0")
    return digest.hexdigest()


def patch_ids(root: Path = REPO) -> list[str]:
    """The patch ids (or the names of their constants) the workflow code calls."""
    found: set[str] = set()
    for name in WORKFLOW_MODULES:
        text = (root / "workflows" / name).read_text()
        found.update(m.strip('"') for m in PATCH_CALL.findall(text))
    return sorted(found)


def current() -> dict[str, object]:
    return {"workflow_code": code_hash(), "patches": patch_ids()}


def stored() -> dict[str, object]:
    return json.loads(FINGERPRINT.read_text())


def write() -> None:
    FINGERPRINT.write_text(json.dumps(current(), indent=2) + "\n")

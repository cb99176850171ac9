"""A task's audit verdict, as `polar tasks audit` left it in S3 (app/task_audit.py).

The audit keeps each task's verdict by fingerprint (what grading depends on, not the
harness) under `audits/<fingerprint>.json`; the console fingerprints the task's spec (its
workflow's start input) and reads that one object. None: never audited (or audited before
verdicts went to S3: they were only in `.polar-audit.json` beside the dataset).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from app.console.session_objects import SessionObjects
from app.task_audit import TaskAudit, audit_key, task_fingerprint
from polar.tasks.spec import TaskSpec


def spec_fingerprint(spec: dict[str, Any]) -> str | None:
    """The audit fingerprint of a task's start input; None if it is no valid TaskSpec."""
    try:
        return task_fingerprint(TaskSpec.model_validate(spec))
    except (ValidationError, ValueError, TypeError):
        return None


async def task_audit(objects: SessionObjects, spec: dict[str, Any]) -> TaskAudit | None:
    """The audit of the task `spec` describes, if one was stored; None otherwise."""
    fingerprint = spec_fingerprint(spec)
    if fingerprint is None:
        return None
    try:
        data = await objects.get(audit_key(fingerprint))
    except KeyError:
        return None
    try:
        return TaskAudit.model_validate(json.loads(data))
    except (ValidationError, ValueError):
        return None

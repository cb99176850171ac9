"""What is checked of a task before it is started (`PolarClient.submit`, `polar submit`): its
workflow id, and a source it does not name."""

from __future__ import annotations

from polar.ids import checked_workflow_id
from polar.tasks.spec import TaskSpec

__all__ = ["NoSourceWarning", "checked_workflow_id", "missing_source"]


class NoSourceWarning(UserWarning):
    """A task that names no `source` and no image of its own: its sessions start in an empty
    workspace. `"source": null` in the spec says that is meant (no warning)."""


def missing_source(task: TaskSpec) -> str | None:
    """The warning for a task that leaves `source` unsaid and runs on Polar's default image
    or the `local` runtime, where the workspace then starts empty; None otherwise (a source,
    an explicit `"source": null`, or an image of the task's own, which holds its workspace)."""
    if "source" in task.model_fields_set or "image" in task.runtime.model_fields_set:
        return None
    return (
        f"task {task.task_id} names no source: its sessions start in an empty workspace "
        '(give "source": {"type": "dir", "path": ...} or {"type": "git", "url": ...}; or '
        '"source": null to say it is meant)'
    )

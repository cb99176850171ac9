"""What is checked of a task before it is started (`PolarClient.submit`, `polar submit`): its
workflow id, a source it does not name, and GPUs no worker declares."""

from __future__ import annotations

from temporalio.client import Client

from polar.gpus import NoGpuWorkers, fitting, gpu_offers, gpu_refusal
from polar.ids import checked_workflow_id
from polar.tasks.spec import TaskSpec

__all__ = [
    "NoGpuWorkers",
    "NoSourceWarning",
    "check_gpu_workers",
    "checked_workflow_id",
    "missing_source",
]


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


async def check_gpu_workers(
    client: Client, namespace: str, task_queue: str, task: TaskSpec
) -> None:
    """NoGpuWorkers (naming what was asked and what is declared) for a task asking for GPUs
    that no worker polling the deployment's GPU queue declares (polar/gpus.py); nothing for a
    task without GPUs."""
    runtime = task.runtime
    if not runtime.gpus:
        return
    offers = await gpu_offers(client, namespace, task_queue)
    if not fitting(offers, runtime.gpus, runtime.gpu_types):
        reason = gpu_refusal(offers, runtime.gpus, runtime.gpu_types, task_queue)
        raise NoGpuWorkers(f"task {task.task_id}: {reason}")

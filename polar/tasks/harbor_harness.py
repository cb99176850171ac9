"""What a Harbor task gives its harness: the task's env, and its `[environment].skills_dir`.

`skills_dir` is a path inside the task's environment (its image), as in Harbor: the
harness adapter copies its contents into the harness's own skills folder before it
starts (activities/harnesses/skills.py). The task's value wins over the harness's own,
as Harbor's trial prefers the task's skills dir.
"""

from __future__ import annotations

from typing import Any

from polar.tasks.harbor_toml import HarborTask, HarborTaskError
from polar.tasks.spec import HarnessSpec

__all__ = ["task_harness"]


def task_harness(
    task: HarborTask, env_cfg: dict[str, Any], base: HarnessSpec, task_env: dict[str, str]
) -> HarnessSpec:
    """`base` (the agent chosen) with the task's env under its own and the task's skills."""
    update: dict[str, Any] = {"env": {**task_env, **base.env}}
    skills = env_cfg.get("skills_dir")
    if skills is not None and not isinstance(skills, str):
        raise HarborTaskError(task.name, "environment.skills_dir", "must be a string (a path)")
    if skills:  # "" is no skills dir, as in Harbor
        if "\x00" in skills or "\n" in skills:
            raise HarborTaskError(task.name, "environment.skills_dir", "not a usable path")
        update["skills_dir"] = skills
    return base.model_copy(update=update, deep=True)

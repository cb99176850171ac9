"""The bundled SWE-style tasks (infra/tasks/build_swe_tasks.py) as tests use them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from tests.support.agent_backend import RepoTask

REPO = Path(__file__).resolve().parents[2]


def load_task_builder() -> ModuleType:
    """infra/tasks/build_swe_tasks.py as a module (its task recipes and `build(out)`)."""
    spec = importlib.util.spec_from_file_location(
        "build_swe_tasks", REPO / "infra" / "tasks" / "build_swe_tasks.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bundled_fix(name: str, variant: str, workspace: Path, check: str) -> RepoTask:
    """The agent backend's task for bundled task `name`: apply its `variant` fix
    ("gold", "wrong" or "breaking") to the one file it changes, in `workspace`."""
    recipe = next(t for t in load_task_builder().TASKS if t["name"] == name)
    ((file, after),) = recipe[variant].items()
    return RepoTask.from_texts(workspace, file, recipe["files"][file], after, check)

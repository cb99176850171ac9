"""No false zero from pytest's rootdir on `local` (issue 21): a session's pytest never meets the
worker's project's pytest configuration.

pytest looks for its configuration in the test paths' folder and every folder above it, up to
`/`, and takes the first `[tool.pytest.ini_options]` (or pytest.ini, tox.ini, setup.cfg
section) it finds: for a source with no ini file of its own, the search leaves the session's
workspace (`{data_dir}/runtimes/{session}/workspace`) and walks up through the data dir. When
the data dir lay inside the worker's checkout (`.polar` was the default), it met the checkout's
`pyproject.toml`: its addopts, plugins and rootdir, and a gold answer got 0. The default data
dir is now outside the checkout (polar/settings/base.py `default_data_dir`), so the walk meets none.

Here the worker's project is a folder with a pytest-configured `pyproject.toml` (its addopts
name an option no runtime knows, as a project's plugin options do) holding the task's source
(no ini file); the session's harness writes the gold fix; a command evaluator runs bare
`python -m pytest` in the fresh workspace: reward 1 with the data dir outside the project.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from activities.worker import running_workers
from polar.client.sdk import PolarClient
from polar.records import SessionStatus
from polar.settings import Settings
from polar.storage import artifact_key
from polar.tasks.spec import TaskSpec

PROJECT_CONFIG = """[project]
name = "the-workers-project"

[tool.pytest.ini_options]
addopts = "--the-projects-plugin-option=on"
testpaths = ["tests"]
"""
CALC = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"
GOLD = "sed -i 's/a - b/a + b/' calc.py"


async def _graded(polar: PolarClient, settings: Settings, project: Path) -> tuple[float, str]:
    """The reward and evaluator log of one gold session whose worker's data dir is
    `settings.data_dir`."""
    source = project / "task-source"
    (source / "tests").mkdir(parents=True)
    (source / "calc.py").write_text(CALC)
    (source / "tests" / "test_calc.py").write_text(TEST)
    spec = TaskSpec.model_validate(
        {
            "task_id": f"rootdir-{uuid.uuid4().hex[:6]}",
            "instruction": "make add() add",
            "source": {"type": "dir", "path": str(source)},
            "runtime": {"kind": "local"},
            "harness": {"kind": "command", "command": GOLD},
            "evaluator": {"kind": "command", "command": "python -m pytest"},
            "timeouts": {"harness_s": 120, "heartbeat_s": 20, "max_attempts": 1},
        }
    )
    async with running_workers(settings):
        client = PolarClient(polar.client, settings)
        result = await client.wait(await client.submit(spec), timeout_s=600)
    [session] = result.sessions
    assert session.status == SessionStatus.COMPLETED, session
    log = "".join(
        polar.storage.get_bytes(artifact_key(session.session_id, name)).decode()
        for name in ("evaluate.stdout", "evaluate.stderr")
    )
    return float(session.reward or 0.0), log


@pytest.mark.slow
async def test_a_gold_answer_gets_1_under_a_pytest_configured_project(
    polar: PolarClient, base_settings: Settings, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(PROJECT_CONFIG)
    (project / "tests").mkdir()
    (project / "tests" / "test_project.py").write_text("def test_never_a_sessions():\n    1 / 0\n")
    data_dir = tmp_path / "state"  # beside the project, as the default is beside the checkout
    data_dir.mkdir(mode=0o711)
    settings = base_settings.model_copy(
        update={"data_dir": data_dir, "task_queue": f"polar-rootdir-{uuid.uuid4().hex[:8]}"}
    )
    reward, log = await _graded(polar, settings, project)
    assert reward == 1.0, log[-3000:]
    assert "rootdir: " in log and str(project / "pyproject.toml") not in log, log[-3000:]

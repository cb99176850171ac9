"""`polar demo`: the stack brought up and the bundled demo task rolled out on it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.dev import dev_up
from app.cli.extras import require_server
from app.cli.main import console
from app.cli.submit import follow_and_print

if TYPE_CHECKING:
    from polar.tasks.spec import TaskSpec


def demo(
    sessions: Annotated[int, typer.Option(help="sessions in the demo group")] = 4,
) -> None:
    """The main job: bring the stack up, roll out the demo task, print the result."""
    require_server("demo")
    import time

    dev_up(model=True, workers=1)
    spec = demo_task(sessions)
    from polar.client.sdk import PolarClient

    async def go() -> None:
        polar = await PolarClient.connect()
        started = time.monotonic()
        run = await polar.submit(spec)
        await follow_and_print(run)
        console.print(f"submit → result: {time.monotonic() - started:.1f}s")
        console.print(f"console: {console_link(run.workflow_id)}")

    asyncio.run(go())


def console_link(workflow_id: str) -> str:
    """The console's page of a task run."""
    from polar.console_links import task_url
    from polar.settings import ConsoleSettings, get_settings

    return task_url(get_settings(ConsoleSettings).console_base_url, workflow_id)


def demo_task(sessions: int) -> TaskSpec:
    """The bundled demo: a multi-turn OpenAI-SDK agent on a tiny repo, graded by a command.

    The task and its repo come from a checkout's examples/demo or the installed package's
    data files (polar.assets); the repo is copied to `.polar/demo/repo` under the working
    directory, which the dev stack's worker may read (its source roots default to its working
    directory; never the data dir, which holds the stack's state)."""
    import shutil

    from polar.assets import asset_dir
    from polar.tasks.spec import TaskSpec

    demo_dir = asset_dir("demo")
    spec = json.loads((demo_dir / "task.json").read_text())
    repo = Path(".polar", "demo", "repo").resolve()
    shutil.copytree(demo_dir / "repo", repo, dirs_exist_ok=True)
    spec["num_sessions"] = sessions
    spec["source"]["path"] = str(repo)
    return TaskSpec.model_validate(spec)

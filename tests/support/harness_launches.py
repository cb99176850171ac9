"""An adapter's launch as the worker prepares it, for the harness tests: a session's context
with a fixed gateway, key, ids and HOME as the runtime sees it (`/h`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from activities.harnesses import ADAPTERS, HarnessContext, Launch
from polar.tasks.spec import HarnessSpec


def prepared_launch(kind: str, home: Path, **spec: Any) -> Launch:
    """`kind`'s adapter prepared in `home` for a spec with `spec`'s fields (the `command`
    harness gets the command `run`)."""
    command = "run" if kind == "command" else None
    ctx = HarnessContext(
        spec=HarnessSpec(kind=kind, command=command, **spec),
        instruction="do it",
        gateway_url="http://127.0.0.1:9",
        api_key="k",
        session_id="s",
        task_id="t",
        home_in_runtime="/h",
    )
    return ADAPTERS.get(kind).prepare(home, "/workspace", ctx)

"""Polar's public API: `from polar import PolarClient, TaskSpec, TaskResult, Trace`.

Each name is imported from its module on first use (PEP 562), so `import polar` (which
every Polar process does) loads none of them, nor Temporal's SDK or pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from polar.client.sdk import Group, PolarClient, TaskRun, TaskStatus
    from polar.contracts import SessionResult, TaskResult
    from polar.records import OutcomeClass, SessionStatus, Trace, TraceProvenance
    from polar.settings import ClientSettings
    from polar.tasks.spec import (
        BuilderSpec,
        DirSource,
        EvaluatorSpec,
        GitSource,
        HarnessSpec,
        RuntimeSpec,
        TaskSpec,
        Timeouts,
    )
    from polar.verdicts import Verdict, task_verdict

PUBLIC_NAMES: dict[str, str] = {
    # the trainer SDK
    "PolarClient": "polar.client.sdk",
    "TaskRun": "polar.client.sdk",
    "TaskStatus": "polar.client.sdk",
    "Group": "polar.client.sdk",
    "ClientSettings": "polar.settings",
    # the task
    "TaskSpec": "polar.tasks.spec",
    "DirSource": "polar.tasks.spec",
    "GitSource": "polar.tasks.spec",
    "RuntimeSpec": "polar.tasks.spec",
    "HarnessSpec": "polar.tasks.spec",
    "BuilderSpec": "polar.tasks.spec",
    "EvaluatorSpec": "polar.tasks.spec",
    "Timeouts": "polar.tasks.spec",
    # results
    "TaskResult": "polar.contracts",
    "SessionResult": "polar.contracts",
    "SessionStatus": "polar.records",
    "OutcomeClass": "polar.records",
    "Verdict": "polar.verdicts",
    "task_verdict": "polar.verdicts",
    # traces
    "Trace": "polar.records",
    "TraceProvenance": "polar.records",
}
"""Each public name and the module that defines it."""

__all__ = [
    "BuilderSpec",
    "ClientSettings",
    "DirSource",
    "EvaluatorSpec",
    "GitSource",
    "Group",
    "HarnessSpec",
    "OutcomeClass",
    "PolarClient",
    "RuntimeSpec",
    "SessionResult",
    "SessionStatus",
    "TaskResult",
    "TaskRun",
    "TaskSpec",
    "TaskStatus",
    "Timeouts",
    "Trace",
    "TraceProvenance",
    "Verdict",
    "task_verdict",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module the first time it is asked for."""
    module = PUBLIC_NAMES.get(name)
    if module is None:  # a submodule not yet imported, or no such name
        raise AttributeError(f"module 'polar' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

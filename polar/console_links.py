"""The console's addresses of a task run and a session (its pages `/tasks/…`, `/sessions/…`),
and how a workflow start carries the console's URL (its memo) to the Temporal Web UI."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

CONSOLE_MEMO = "polar_console_url"
"""Memo key of the console's base URL on a RolloutTask, SessionBatch or Session start: the
submitting client sets it, a task hands it to its children (workflows/web_ui.py)."""


def task_url(base: str, workflow_id: str) -> str:
    """The console page of the task run `workflow_id` under the console's `base` URL."""
    return f"{base.rstrip('/')}/tasks/{quote(workflow_id, safe='')}"


def session_url(base: str, session_id: str) -> str:
    """The console page of the session `session_id` under the console's `base` URL."""
    return f"{base.rstrip('/')}/sessions/{quote(session_id, safe='')}"


def console_memo(base: str | None) -> dict[str, Any] | None:
    """The start's memo carrying the console's URL (None: no console, no memo)."""
    return {CONSOLE_MEMO: base} if base else None


def task_link(base: str | None, workflow_id: str) -> str | None:
    """A Markdown link to the task run's console page; None without a console."""
    return f"[Task in the Polar console]({task_url(base, workflow_id)})" if base else None


def session_link(base: str | None, session_id: str) -> str | None:
    """A Markdown link to the session's console page; None without a console."""
    return f"[Session in the Polar console]({session_url(base, session_id)})" if base else None

"""What a task's and a session's workflow shows in the Temporal Web UI's own fields: Markdown
with its stage, reward and outcome, and a link to its console page.

The console's URL comes with the start: the submitting client puts it in the task's memo
(`polar.console_links.CONSOLE_MEMO`, from `POLAR_CONSOLE_PUBLIC_URL`), the task hands it to
its children in theirs. A workflow reads it from its own memo, so its history fixes it and
a replay sees the same; a start without it (no console configured, `temporal workflow
start` by hand) shows no link. Links go in static details (set at the start) and current
details (served by the `__temporal_workflow_metadata` query); neither is a command that
the replayer compares (tests/integration/test_web_ui_summaries.py shows it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from temporalio import workflow

from polar.console_links import CONSOLE_MEMO, session_link, task_link


def console_base() -> str | None:
    """The console's base URL from the running workflow's memo; None when it has none."""
    value = workflow.memo_value(CONSOLE_MEMO, None)
    return value if isinstance(value, str) and value else None


def with_link(text: str, link: str | None) -> str:
    return f"{text}\n\n{link}" if link else text


def reward_text(reward: float | None) -> str:
    return "-" if reward is None else f"{reward:g}"


def session_details(
    stage: str, detail: str, base: str | None, session_id: str, *, ended: Mapping[str, Any]
) -> str:
    """A session's current details: its stage and what it does; once ended (`ended`: its
    status, reward and outcome label) those; and its console link."""
    if ended:
        detail = (
            f"{ended['status']} · reward **{reward_text(ended['reward'])}** · "
            f"outcome **{ended['outcome'] or '-'}**"
        )
    return with_link(f"**{stage}**: {detail}", session_link(base, session_id))


def task_details(
    stage: str,
    counts: tuple[int, int],
    rewards: list[float],
    outcomes: Mapping[str, int],
    base: str | None,
    workflow_id: str,
) -> str:
    """A task's current details: its stage, sessions done of total (`counts`), mean reward,
    outcome counts, and its console link."""
    text = f"**{stage}**: {counts[0]}/{counts[1]} sessions done"
    if rewards:
        text += f" · mean reward **{sum(rewards) / len(rewards):.3f}**"
    if outcomes:
        text += " · outcomes " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
    return with_link(text, task_link(base, workflow_id))

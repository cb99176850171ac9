"""What every trainer adapter shares: which sessions train, one session run, its chains.

A session trains only when its harness reached an outcome the evaluator graded: status
`completed`, `harness_failed` or `timeout` with a reward, and an outcome that is a verdict on
the policy (polar/outcomes.py). Everything else (no reward, `error`, `cancelled`, an
`infra_error` such as a harness that failed after calls the gateway could not serve, any
status added later) says nothing about the policy and is left out, never turned into a
zero-reward sample. A group that lost members to infra errors follows its task's
`infra_errors.group` rule (`drop`: none of its sessions trains).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar.advantages import group_rewards, is_verdict
from polar.client.sdk import PolarClient
from polar.contracts import SessionResult, TaskResult
from polar.records import SessionStatus, Trace
from polar.settings import ClientSettings, get_settings
from polar.tasks.spec import TaskSpec

_clients: dict[int, PolarClient] = {}


async def shared_client() -> PolarClient:
    """One Polar client per event loop (a trainer's agent loops, a Gym server), connected
    from the POLAR_* settings at first use."""
    key = id(asyncio.get_running_loop())
    if key not in _clients:
        _clients[key] = await PolarClient.connect(get_settings(ClientSettings))
    return _clients[key]


GRADED = frozenset({SessionStatus.COMPLETED, SessionStatus.HARNESS_FAILED, SessionStatus.TIMEOUT})
"""Statuses of a harness that ran to an outcome; only these, with a reward, are trained on."""


def trainable(session: SessionResult) -> bool:
    """Whether `session` is trained on: a graded status, a verdict outcome, a reward, traces."""
    return (
        session.status in GRADED
        and is_verdict(session)
        and session.reward is not None
        and bool(session.traces_key)
    )


def absent_reason(session: SessionResult) -> str:
    """Why `trainable(session)` is False, for counters and logs."""
    if session.status not in GRADED:
        return f"status {session.status.value}"
    if not is_verdict(session) and session.outcome is not None:
        return session.outcome.label  # e.g. infra_error:inference_backend (a counter's key)
    if session.reward is None:
        return "no reward"
    return "no traces"


def chains(traces: Sequence[Trace]) -> list[Trace]:
    """A session's traces in the order their first model call was made (the root chain first)."""
    return sorted(traces, key=lambda t: (min(t.provenance.completion_seqs, default=0), t.trace_id))


def load_template(task: TaskSpec | dict[str, Any] | str | Path | None) -> dict[str, Any] | None:
    """A TaskSpec template from a spec, a dict, a JSON string or a JSON file path."""
    if task is None or isinstance(task, dict):
        return task
    if isinstance(task, TaskSpec):
        return task.model_dump(mode="json")
    text = str(task)
    loaded = json.loads(text if text.lstrip().startswith("{") else Path(text).read_text())
    if not isinstance(loaded, dict):
        raise ValueError(f"a Polar task must be a JSON object, got {type(loaded).__name__}")
    return loaded


def last_user_text(messages: Any) -> str | None:
    """The last user message's text of a chat message list (or the text itself)."""
    if isinstance(messages, str):
        return messages
    for message in reversed(list(messages) if messages is not None else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                parts = [p.get("text", "") for p in content if isinstance(p, dict)]
                return "".join(parts)
    return None


def row_task(
    template: dict[str, Any] | None, row: Any, prompt: Any, *, where: str
) -> dict[str, Any]:
    """A row's task: the template, the row's own task fields (`row`: anything `load_template`
    reads) over it, and, where no instruction is set, the prompt's last user text. `where` names
    where a trainer user sets the template, for the error when there is none."""
    spec = dict(template or {})
    spec.update(load_template(row) or {})
    if not spec:
        raise ValueError(f"no Polar task for this row: set {where}")
    if not spec.get("instruction"):
        spec["instruction"] = last_user_text(prompt) or ""
    return spec


def task_with(
    template: TaskSpec | dict[str, Any], *, task_id: str | None = None, **fields: Any
) -> TaskSpec:
    """A copy of `template` with `fields` set (None values left as the template has them) and a
    fresh task id under the template's own (`{template id}-{8 hex}` unless given)."""
    spec = template if isinstance(template, TaskSpec) else TaskSpec.model_validate(template)
    data = spec.model_dump(mode="json")
    data.update({k: v for k, v in fields.items() if v is not None})
    data["task_id"] = task_id or f"{spec.task_id}-{uuid.uuid4().hex[:8]}"
    return TaskSpec.model_validate(data)


@dataclass
class SessionRun:
    """One finished session and its traces (empty when it is not trainable)."""

    task: TaskResult
    workflow_id: str
    session: SessionResult
    traces: list[Trace]
    left_out: str | None = None
    """Why the session does not train (None: it trains): `absent_reason`, or its group dropped
    by the task's `infra_errors.group` rule."""


def left_out(sessions: Sequence[SessionResult], rule: str) -> dict[str, str | None]:
    """Why each session of one group does not train (None: it trains), under `rule` (the
    task's `infra_errors.group`)."""
    rewards = group_rewards(sessions, rule)
    dropped = [s.session_id for s in sessions if trainable(s) and rewards[s.session_id] is None]
    return {
        s.session_id: (
            absent_reason(s)
            if not trainable(s)
            else (
                "group dropped (infra_errors.group: drop): a session of it ended infra_error"
                if s.session_id in dropped
                else None
            )
        )
        for s in sessions
    }


async def run_task(
    polar: PolarClient, spec: TaskSpec, *, timeout_s: float | None = None
) -> list[SessionRun]:
    """Submit `spec`, wait for it, and load the traces of its trainable sessions."""
    run = await polar.submit(spec)
    result = await polar.wait(run, timeout_s=timeout_s)
    why = left_out(result.sessions, spec.infra_errors.group)
    runs = []
    for session in sorted(result.sessions, key=lambda s: s.index):
        reason = why[session.session_id]
        traces = await asyncio.to_thread(polar.load_traces, session) if reason is None else []
        runs.append(SessionRun(result, run.workflow_id, session, traces, reason))
    return runs

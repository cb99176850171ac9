"""What every trainer adapter shares: which sessions train, one session run, its chains.

A session trains only when its harness reached an outcome the evaluator graded: status
`completed`, `harness_failed` or `timeout` with a reward, and an outcome that is a verdict on
the policy (polar/outcomes.py). Everything else (no reward, `error`, `cancelled`, an
`infra_error` such as a harness that failed after calls the gateway could not serve, any
status added later) says nothing about the policy and is left out, never turned into a
zero-reward sample. A group that lost members to infra errors follows its task's
`infra_errors.group` rule (`drop`: none of its sessions trains).

A batch in which no session (or fewer than the share `min_scored` the trainer sets) was scored
is never trained on: every bridge calls `require_scored`, which raises `UnscoredBatch` naming
the counts and each outcome label with one example of its detail.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
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
    """Why `trainable(session)` is False, as a counter's key: the outcome label of a session
    that is no verdict (`task_error`, `infra_error:inference_backend`), `cancelled`, else
    `no reward` or `no traces`."""
    outcome = session.outcome
    if outcome is not None and not is_verdict(session):
        return outcome.label
    if session.status not in GRADED:
        return session.status.value  # cancelled (no outcome), or a status added later
    if session.reward is None:
        return "no reward"
    return "no traces"


def absent_detail(session: SessionResult) -> str:
    """One line on why a session is not trained on: the failing stage's error (its message),
    else the outcome's detail ("" where there is none)."""
    if session.error:
        return session.error
    outcome = session.outcome
    return outcome.detail if outcome is not None else ""


@dataclass(frozen=True)
class Unscored:
    """Why one session is not trained on: a counter's `label` (`absent_reason`, or the group
    rule that dropped it) and one line of `detail`."""

    label: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.label}: {self.detail}" if self.detail else self.label


def unscored(session: SessionResult, reason: str | None) -> Unscored | None:
    """`reason` (from `left_out`: None, the session trains) with the session's detail."""
    return None if reason is None else Unscored(reason, absent_detail(session))


class UnscoredBatch(RuntimeError):
    """A batch with no scored session, or fewer than the trainer's `min_scored` share: training
    on it would train on nothing (see `require_scored`)."""

    def __init__(self, message: str, *, scored: int, asked: int, labels: dict[str, int]) -> None:
        super().__init__(message)
        self.scored = scored
        self.asked = asked
        self.labels = labels
        """how many sessions were left out, by label."""


def check_min_scored(min_scored: float | None) -> float | None:
    """`min_scored` as a bridge takes it: a share in 0..1, or None (never raise)."""
    if min_scored is None:
        return None
    share = float(min_scored)
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"min_scored must be a share between 0 and 1 (or None), not {min_scored}")
    return share


def require_scored(
    reasons: Sequence[Unscored | None],
    min_scored: float | None = 0.0,
    *,
    asked: int | None = None,
    what: str = "batch",
    note: str = "",
) -> None:
    """Raise `UnscoredBatch` when too few of a batch's sessions were scored.

    `reasons`: each session's (None: scored and trained on). `min_scored`: the share of the
    sessions asked for that must be scored: 0.0 (the default) raises only when none was, None
    never raises. `asked`: how many sessions the batch asked for (default: len(reasons));
    extra sessions that an early stop cancelled do not count against it. `what` names the
    batch, `note` says what the trainer can do, in the message."""
    share_needed = check_min_scored(min_scored)
    if share_needed is None:
        return
    total = len(reasons) if asked is None else asked
    scored = sum(reason is None for reason in reasons)
    if total <= 0 or (scored > 0 and min(scored, total) / total >= share_needed):
        return
    raise unscored_batch(reasons, share_needed, asked=total, what=what, note=note)


def unscored_batch(
    reasons: Sequence[Unscored | None],
    min_scored: float,
    *,
    asked: int | None = None,
    what: str = "batch",
    note: str = "",
) -> UnscoredBatch:
    """The `UnscoredBatch` of `reasons`: `{what}: {scored} of {asked} sessions scored
    (min_scored …): {n} × {label} ({an example detail}); …. {note}`."""
    total = len(reasons) if asked is None else asked
    scored = sum(reason is None for reason in reasons)
    labels = Counter(reason.label for reason in reasons if reason is not None)
    example: dict[str, str] = {}
    for reason in reasons:
        if reason is not None and reason.detail:
            example.setdefault(reason.label, reason.detail)
    parts = [
        f"{count} × {label}" + (f" ({example[label]})" if label in example else "")
        for label, count in labels.most_common()
    ]
    message = (
        f"{what}: {scored} of {total} sessions scored (min_scored {min_scored}): "
        + ("; ".join(parts) or "no session ran")
        + (f". {note}" if note else "")
    )
    return UnscoredBatch(message, scored=scored, asked=total, labels=dict(labels))


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

    @property
    def unscored(self) -> Unscored | None:
        """`left_out` with the session's detail (None: it trains)."""
        return unscored(self.session, self.left_out)


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

"""What TRL's rollout function (`PolarRolloutFunc`) keeps between calls: the tasks it submitted
ahead, each finished group with its sessions, and its cumulated figures."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from polar.client.sdk import TaskRun
from polar.contracts import SessionResult, TaskResult
from polar.records import Trace


@dataclass
class Prefetched:
    """A task submitted ahead for a prompt, with the version it was submitted at."""

    key: str
    run: TaskRun
    version: int
    submitted: float


@dataclass
class GroupRun:
    """One group's finished task: its workflow, result, and each session with its traces."""

    workflow_id: str
    result: TaskResult
    sessions: list[tuple[SessionResult, list[Trace]]] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    """Why a session does not train (`_sessions.left_out`: its own state, or its group
    dropped by the task's `infra_errors.group` rule), by session id."""


@dataclass
class RolloutStats:
    """What the rollout function did, cumulated (and per call in `per_call`)."""

    calls: int = 0
    tasks: int = 0
    sessions: int = 0
    rows_trained: int = 0
    unscored_rows: int = 0
    unscored_reasons: Counter[str] = field(default_factory=Counter)
    chains_left_out: int = 0
    tokens_left_out: int = 0
    prefetch_used: int = 0
    prefetch_dropped: int = 0
    prefetch_dropped_reasons: Counter[str] = field(default_factory=Counter)
    syncs: int = 0
    wait_s: float = 0.0
    sync_s: float = 0.0
    per_call: list[dict[str, Any]] = field(default_factory=list)

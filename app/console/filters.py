"""The tasks page's filters: query parameters checked and turned into a visibility query."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from polar import search_attributes as sa
from polar.records import OutcomeClass

SAFE_TEXT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$")
"""What a filter value may be: an id's characters, never a quote (no query injection)."""

STATUSES = {
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "canceled": "Canceled",
    "terminated": "Terminated",
    "timed_out": "TimedOut",
}
"""Workflow statuses a filter may name (lowercase) → visibility's ExecutionStatus."""

OUTCOMES = tuple(o.value for o in OutcomeClass)
"""Outcome classes a filter may name: tasks with at least one session of that class."""

SINCE = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}
"""How far back the time filter may look."""

MAX_LIMIT = 200


class BadFilter(ValueError):
    """A filter value the console refuses (shown to the user, never put in a query)."""


def checked_text(name: str, value: str | None) -> str | None:
    """`value` stripped, or None when empty; BadFilter if it holds other than id characters."""
    value = (value or "").strip()
    if not value:
        return None
    if not SAFE_TEXT.match(value):
        raise BadFilter(f"{name}: letters, digits and . _ : @ + - only")
    return value


@dataclass(frozen=True)
class TaskFilters:
    """The filters of the tasks page, each checked."""

    task: str | None = None
    harness: str | None = None
    runtime: str | None = None
    status: str | None = None
    since: str | None = None
    outcome: str | None = None
    limit: int = 50

    @classmethod
    def parse(
        cls,
        task: str | None = None,
        harness: str | None = None,
        runtime: str | None = None,
        status: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        outcome: str | None = None,
    ) -> TaskFilters:
        """The filters of a request's query parameters; BadFilter for an unknown value."""
        status = (status or "").strip().lower() or None
        if status is not None and status not in STATUSES:
            raise BadFilter(f"status: one of {', '.join(STATUSES)}")
        since = (since or "").strip() or None
        if since is not None and since not in SINCE:
            raise BadFilter(f"since: one of {', '.join(SINCE)}")
        outcome = (outcome or "").strip() or None
        if outcome is not None and outcome not in OUTCOMES:
            raise BadFilter(f"outcome: one of {', '.join(OUTCOMES)}")
        return cls(
            outcome=outcome,
            task=checked_text("task", task),
            harness=checked_text("harness", harness),
            runtime=checked_text("runtime", runtime),
            status=status,
            since=since,
            limit=max(1, min(limit or 50, MAX_LIMIT)),
        )

    def visibility_query(self, now: datetime | None = None) -> str:
        """The visibility query of these filters (runtime is not indexed: `matches_runtime`)."""
        clauses = ["WorkflowType = 'RolloutTask'"]
        if self.task:
            clauses.append(
                f"({sa.TASK_ID.name} STARTS_WITH '{self.task}' OR WorkflowId = '{self.task}')"
            )
        if self.harness:
            clauses.append(f"{sa.HARNESS.name} = '{self.harness}'")
        if self.status:
            clauses.append(f"ExecutionStatus = '{STATUSES[self.status]}'")
        if self.since:
            start = (now or datetime.now(UTC)) - SINCE[self.since]
            clauses.append(f"StartTime > '{start.strftime('%Y-%m-%dT%H:%M:%SZ')}'")
        return " AND ".join(clauses)

    def matches_runtime(self, runtime: str | None) -> bool:
        """Whether a task of `runtime` (its spec's runtime kind) passes the runtime filter."""
        return self.runtime is None or runtime == self.runtime

    def matches_outcomes(self, counts: dict[str, int]) -> bool:
        """Whether a task with these outcome counts has a session of the filter's class."""
        return self.outcome is None or counts.get(self.outcome, 0) > 0

"""Per-test statuses from Polar's pytest plugin's results file (pytest_results.py).

Statuses are SWE-bench's: PASSED, FAILED, ERROR, SKIPPED, XFAIL. A test's
status comes from its setup, call and teardown reports: a failed setup or
teardown is ERROR, a failed call FAILED, a skip SKIPPED (XFAIL for an
expected failure), a passed call PASSED (an unexpected pass of a non-strict
xfail too: pytest counts it a success). A test reported by several pytest
sessions (a test command that runs pytest twice) keeps its worst status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

WORST_FIRST = ("ERROR", "FAILED", "SKIPPED", "XFAIL", "PASSED")


def _worse(a: str | None, b: str) -> str:
    if a is None:
        return b
    return a if WORST_FIRST.index(a) <= WORST_FIRST.index(b) else b


@dataclass
class PytestRun:
    """What the plugin wrote: statuses, collection problems, sessions started and finished."""

    status: dict[str, str] = field(default_factory=dict)
    collect_problems: dict[str, str] = field(default_factory=dict)
    started: int = 0
    finished: int = 0
    exit_statuses: list[int] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every pytest session that started also finished (none died mid-run)."""
        return self.started > 0 and self.finished >= self.started

    @property
    def any_failure(self) -> bool:
        return bool(self.collect_problems) or any(
            s in ("FAILED", "ERROR") for s in self.status.values()
        )


def _test_status(when: str, outcome: str, xfail: bool) -> str | None:
    if outcome == "failed":
        return "FAILED" if when == "call" else "ERROR"
    if outcome == "skipped":
        return "XFAIL" if xfail else "SKIPPED"
    if outcome == "passed" and when == "call":
        return "PASSED"
    return None  # a passed setup or teardown, a rerun


def parse_results(text: str) -> PytestRun:
    """The run the plugin's JSON lines describe (an unreadable line is skipped)."""
    run = PytestRun()
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        event = record.get("event")
        if event == "start":
            run.started += 1
        elif event == "finish":
            run.finished += 1
            if isinstance(record.get("exitstatus"), int):
                run.exit_statuses.append(record["exitstatus"])
        elif event == "collect":
            run.collect_problems[str(record.get("nodeid"))] = (
                f"{record.get('outcome')}: {str(record.get('why', ''))[-300:]}"
            )
        elif event == "test":
            status = _test_status(
                str(record.get("when")), str(record.get("outcome")), bool(record.get("xfail"))
            )
            nodeid = str(record.get("nodeid"))
            if status is not None:
                run.status[nodeid] = _worse(run.status.get(nodeid), status)
    return run


def read_results(path: Path) -> PytestRun | None:
    """The run in `path`, or None when the plugin never wrote it."""
    if not path.exists():
        return None
    return parse_results(path.read_text(encoding="utf-8", errors="replace"))

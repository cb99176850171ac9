"""Per-test statuses from Polar's pytest plugin's results file (pytest_results.py).

Statuses are SWE-bench's: PASSED, FAILED, ERROR, SKIPPED, XFAIL. A test's
status comes from its setup, call and teardown reports: a failed setup or
teardown is ERROR, a failed call FAILED, a skip SKIPPED (XFAIL for an
expected failure), a passed call PASSED (an unexpected pass of a non-strict
xfail too: pytest counts it a success). A test reported by several pytest
sessions keeps its worst status.

The records reach the worker inside the runner's signed results file
(pytest_runner.py): `verify_results` checks its HMAC under the run's key
before a single record is read.
"""

from __future__ import annotations

import hashlib
import hmac
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
    booted: bool = False
    """pytest was imported and Polar's plugin loaded (the runner's child got that far)."""
    tampered: list[str] = field(default_factory=list)
    returncode: int | None = None
    """The pytest process's exit status, from the runner's waitpid (signed results only)."""
    overflow: bool = False
    non_dumpable: bool | None = None

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
        if event == "boot":
            run.booted = True
        elif event == "tampered":
            run.tampered.append(str(record.get("why"))[:500])
        elif event == "start":
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
    """The run in an unsigned JSON-lines file at `path`, or None when there is none."""
    if not path.exists():
        return None
    return parse_results(path.read_text(encoding="utf-8", errors="replace"))


def verify_results(data: bytes | None, key: bytes) -> tuple[PytestRun | None, str | None]:
    """(the run, None) from the runner's results file `data` if its MAC under `key` holds;
    (None, why) where it is missing, unreadable or not authentic."""
    if data is None:
        return None, "the runner left no results file (killed, or the file was removed)"
    try:
        outer = json.loads(data)
        body, mac = outer["body"], outer["mac"]
        if not isinstance(body, str) or not isinstance(mac, str):
            raise TypeError("body and mac must be strings")
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"the results file is not the runner's ({exc})"
    want = hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, mac):
        return None, "the results file is not authentic (its MAC does not verify)"
    try:
        signed = json.loads(body)
    except ValueError as exc:  # signed, so the runner's own bug
        return None, f"the runner's results do not parse ({exc})"
    run = parse_results(str(signed.get("records") or ""))
    code = signed.get("returncode")
    run.returncode = code if isinstance(code, int) else None
    run.overflow = bool(signed.get("overflow"))
    run.non_dumpable = signed.get("non_dumpable")
    return run, None

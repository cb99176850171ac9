"""A session's grade as the session page shows it, read from its stored evaluation report:
per-test results, reward components, the rubric judge's score and reason, and the files
dropped from the patch. Fields a report lacks are left empty; a report that is not JSON
gives nothing (the raw report is still shown)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TestResult:
    """One test's result, and what the task required of it."""

    test: str
    status: str
    required: str = ""
    """`FAIL_TO_PASS` / `PASS_TO_PASS` (SWE-bench), or "" for a test the task did not name."""


@dataclass
class Rubric:
    """The rubric judge's part in the reward."""

    score: float | None
    reason: str | None
    judge_error: str | None
    formula: str
    outcome: float | None
    reward: float | None


@dataclass
class GradeFacts:
    tests: list[TestResult] = field(default_factory=list)
    components: dict[str, float] = field(default_factory=dict)
    rubric: Rubric | None = None
    protected_dropped: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """what went wrong in grading: evaluator error, invalid reward, apply failure, tampering."""

    def __bool__(self) -> bool:
        return bool(
            self.tests
            or self.components
            or self.rubric
            or self.protected_dropped
            or self.dropped
            or self.problems
        )


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def tests_of(report: dict[str, Any]) -> list[TestResult]:
    """Per-test results: the report's `test_status` with each test's requirement, then the
    required tests it has no status for (status `missing`)."""
    required: dict[str, str] = {}
    for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        outcomes = report.get(group)
        if isinstance(outcomes, dict):
            for test in _strings(outcomes.get("success")) + _strings(outcomes.get("failure")):
                required.setdefault(test, group)
    status = report.get("test_status")
    status = status if isinstance(status, dict) else {}
    out = [TestResult(str(t), str(s), required.get(str(t), "")) for t, s in status.items()]
    out += [TestResult(t, "missing", g) for t, g in required.items() if t not in status]
    return sorted(out, key=lambda r: (r.required == "", r.required, r.test))


def rubric_of(report: dict[str, Any]) -> Rubric | None:
    rubric = report.get("rubric")
    if not isinstance(rubric, dict):
        return None
    return Rubric(
        score=_number(rubric.get("score")),
        reason=rubric.get("reason") if isinstance(rubric.get("reason"), str) else None,
        judge_error=str(rubric["judge_error"]) if rubric.get("judge_error") else None,
        formula=str(rubric.get("formula") or ""),
        outcome=_number(rubric.get("outcome")),
        reward=_number(rubric.get("reward")),
    )


def problems_of(report: dict[str, Any]) -> list[str]:
    out = []
    for key in ("evaluator_error", "invalid_reward", "extract_error", "results_problem"):
        if report.get(key):
            out.append(f"{key}: {report[key]}")
    if report.get("patch_apply_failed"):
        out.append("the patch did not apply")
    tampered = _strings(report.get("tampered"))
    if tampered:
        out.append("tampered: " + ", ".join(tampered))
    return out


def grade_facts(report_text: str) -> GradeFacts:
    """What the grade section shows of one stored report (empty when it is not a JSON object)."""
    try:
        report = json.loads(report_text)
    except ValueError:
        return GradeFacts()
    if not isinstance(report, dict):
        return GradeFacts()
    components = report.get("components")
    return GradeFacts(
        tests=tests_of(report),
        components={
            str(k): v
            for k, v in (components.items() if isinstance(components, dict) else [])
            if _number(v) is not None
        },
        rubric=rubric_of(report),
        protected_dropped=_strings(report.get("protected_files_dropped")),
        dropped=_strings(report.get("dropped_files")),
        problems=problems_of(report),
    )

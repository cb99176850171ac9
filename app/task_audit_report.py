"""`polar tasks audit`'s report: the table (a column per probe, `!` where a reward is wrong),
as rows, as Markdown, and as JSON."""

from __future__ import annotations

from typing import Any

from app.adversaries import ADVERSARIES
from app.task_audit import NOOP, ORACLE, PLANT_READS, TEST_EDIT, AuditReport, ProbeResult


def probe_names(report: AuditReport) -> list[str]:
    """The report's probe columns: oracle, no-op, then adversaries in their built-in order."""
    seen = {r.probe for t in report.tasks for r in t.probes}
    order = [ORACLE, NOOP, TEST_EDIT, *ADVERSARIES, PLANT_READS]
    return [n for n in order if n in seen] + sorted(seen - set(order))


def cell(result: ProbeResult | None) -> str:
    """A probe's table cell: its reward (`error` without one), `!` where it is wrong."""
    if result is None:
        return "-"
    shown = "error" if result.reward is None else f"{result.reward:g}"
    return shown if result.ok else f"{shown} !"


def report_rows(report: AuditReport) -> tuple[list[str], list[list[str]]]:
    """The audit table: task, one column per probe, verdict (with the hacks), session-seconds,
    grading seconds, and how the image came to be (when one was built)."""
    names = probe_names(report)
    images = any(t.build for t in report.tasks)
    header = ["task", *names, "verdict", "session s", "grading s", *(["image"] if images else [])]
    rows = []
    for t in report.tasks:
        by_name = {r.probe: r for r in t.probes}
        verdict = t.verdict + (f" ({', '.join(t.hacks)})" if t.hacks else "")
        grading = "-" if t.grading_seconds is None else f"{t.grading_seconds:.1f}"
        cells = [cell(by_name.get(n)) for n in names]
        image = [t.build or "-"] if images else []
        rows.append([t.task_id, *cells, verdict, f"{t.seconds:g}", grading, *image])
    return header, rows


def markdown_table(report: AuditReport) -> str:
    """The audit table as Markdown (for docs and issue notes)."""
    header, rows = report_rows(report)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def report_json(report: AuditReport) -> dict[str, Any]:
    """The report as JSON (each task's probes, verdict and hacks; each adversary's hack)."""
    return report.model_dump(mode="json")

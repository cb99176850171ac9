"""The bad-input tables of docs/errors.md, read by the tests that run each row."""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.paths import REPO


@dataclass(frozen=True)
class Row:
    """One row: its case name, the message it must show, its exit code or status (as written)."""

    case: str
    message: str
    status: str


def table_rows(header: str) -> list[Row]:
    """The rows of the docs/errors.md table under `header` (backticks stripped from each cell;
    the table's cells: case, input, message, status)."""
    lines = (REPO / "docs" / "errors.md").read_text().splitlines()
    start = lines.index(header) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        case, _, message, status = [c.strip() for c in line.strip("|").split("|")]
        rows.append(Row(case.strip("`"), message.strip("`"), status))
    return rows

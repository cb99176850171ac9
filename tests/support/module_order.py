"""The order a lane's test files reach the xdist workers: the longest first.

`--dist loadfile` hands files out in collection order (a few to each worker at the start, then
one to whichever frees first). Collected alphabetically, the system lane's longest files
(`test_task_audit`, `test_trl_*`, `test_verl_*`) came last, and one worker ran them alone while
the other sat idle. Longest first (the greedy LPT rule) ends the workers close together.

The figures are a full run's seconds per file (`tests/support/module_seconds.json`, written by
`python -m tests.support.module_order reports/*.xml` from the lanes' JUnit files); a file they
do not name counts as `UNKNOWN_S`. Only the order changes: every test still runs, and a file's
tests stay together, in their own order.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import TypeVar

FIGURES = Path(__file__).with_name("module_seconds.json")
UNKNOWN_S = 30.0
"""The seconds a file without a figure counts as (a new file: a middling one)."""

Item = TypeVar("Item")


def module_seconds(path: Path = FIGURES) -> dict[str, float]:
    """The recorded seconds per test file (relative path), or {} without figures."""
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}


def longest_first(
    items: list[Item], file_of: dict[int, str], seconds: dict[str, float]
) -> list[Item]:
    """`items` with their files longest first (`file_of`: id(item) -> its file); a file's
    items keep their order, and files of equal figures their collection order."""
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(file_of[id(item)], len(first_seen))

    def key(item: Item) -> tuple[float, int]:
        name = file_of[id(item)]
        return (-seconds.get(name, UNKNOWN_S), first_seen[name])

    return sorted(items, key=key)  # stable: a file's own order is kept


def seconds_from_junit(reports: list[Path]) -> dict[str, float]:
    """Seconds per test file summed over JUnit reports (a testcase's time: setup, call and
    teardown, so a module fixture counts for its file)."""
    out: dict[str, float] = defaultdict(float)
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            module = (case.get("classname") or "").split("::")[0]
            parts = module.split(".")
            while parts and not parts[-1].startswith("test_"):
                parts.pop()  # a test class's name after its module's
            if parts:
                out["/".join(parts) + ".py"] += float(case.get("time") or 0.0)
    return {k: round(v, 1) for k, v in sorted(out.items())}


def main(argv: list[str]) -> int:
    """Write FIGURES from the JUnit reports named on the command line."""
    if not argv:
        print("usage: python -m tests.support.module_order REPORT.xml ...", file=sys.stderr)
        return 2
    figures = module_seconds() | seconds_from_junit([Path(a) for a in argv])
    FIGURES.write_text(json.dumps(dict(sorted(figures.items())), indent=1) + "\n")
    print(f"{len(figures)} files' seconds → {FIGURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

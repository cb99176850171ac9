"""Each lane's counts and time from pytest's JUnit XML, then the suite's closing line.

.venv/bin/python scripts/lane_summary.py reports/unit.xml reports/integration.xml ...
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

FIELDS = ("tests", "failures", "errors", "skipped")


def counts(report: Path) -> dict[str, float]:
    """The totals of one JUnit file (its testsuite elements summed); zeros when it is missing."""
    total = dict.fromkeys((*FIELDS, "time"), 0.0)
    if not report.exists():
        return total
    root = ET.parse(report).getroot()
    for suite in [root] if root.tag == "testsuite" else root.iter("testsuite"):
        for key in total:
            total[key] += float(suite.get(key, 0))
    return total


def main(paths: list[str]) -> int:
    grand = dict.fromkeys((*FIELDS, "time"), 0.0)
    for path in map(Path, paths):
        c = counts(path)
        passed = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
        print(
            f"{path.stem:12} {int(c['tests']):4} tests: {int(passed)} passed, "
            f"{int(c['failures'] + c['errors'])} failed, {int(c['skipped'])} skipped "
            f"in {c['time']:.0f} s"
        )
        for key in grand:
            grand[key] += c[key]
    failed = int(grand["failures"] + grand["errors"])
    passed = int(grand["tests"]) - failed - int(grand["skipped"])
    print(f"suite: {passed} passed, {failed} failed, {int(grand['skipped'])} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

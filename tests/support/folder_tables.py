"""The "Where things live" folder tables of README.md and docs/architecture.md, read as
(folder, what the row says it holds) pairs, and the product packages they must name."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO

PRODUCT = ("app", "polar", "proxy", "workflows", "activities")
"""The installed packages, top first (scripts/import_graph.py)."""


def folder_rows(page: Path, heading: str = "## Where things live") -> list[tuple[str, str]]:
    """Each row of the table under `heading`: every folder its first cell names (`x/`), with
    the row's second cell."""
    section = page.read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    rows = []
    for first, rest in re.findall(r"^\| (.+?) \| (.+?) \|$", section, flags=re.MULTILINE):
        rows += [(folder, rest) for folder in re.findall(r"`([^`]+/)`", first)]
    return rows


def product_packages(depth: int) -> set[str]:
    """Every product package folder (`activities/runtimes/kinds/`) at most `depth` folders
    below its top-level package."""
    found = set()
    for top in PRODUCT:
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO)
            if len(rel.parts) <= depth + 1 and "__pycache__" not in rel.parts:
                found.add(f"{rel.as_posix()}/")
    return found

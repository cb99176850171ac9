"""docs/architecture.md is checked against the tree: its folder table names every product
package (and its subpackages one level down), every folder it names exists, and every
module a row names (`spec.py`, `kinds/local.py`) is in that row's folder."""

from __future__ import annotations

import re

from tests.support.folder_tables import folder_rows, product_packages
from tests.support.paths import REPO

PAGE = REPO / "docs" / "architecture.md"


def test_every_product_package_has_a_row() -> None:
    named = {folder for folder, _ in folder_rows(PAGE)}
    missing = sorted(product_packages(depth=2) - named)
    assert not missing, f"docs/architecture.md's folder table leaves out {missing}"


def test_every_folder_and_module_it_names_exists() -> None:
    wrong = []
    for folder, holds in folder_rows(PAGE):
        if not (REPO / folder).is_dir():
            wrong.append(f"{folder}: no such folder")
        for module in re.findall(r"`([\w/]+\.py)`", holds):
            if not (REPO / folder / module).is_file() and not (REPO / module).is_file():
                wrong.append(f"{folder}: names {module}, which is not there")
    assert not wrong, "docs/architecture.md's folder table:\n" + "\n".join(wrong)


def test_the_check_reads_the_table() -> None:
    rows = dict(folder_rows(PAGE))
    assert "`spec.py`" in rows["polar/tasks/"]  # a folder and what its row says it holds
    assert len(rows) >= 15

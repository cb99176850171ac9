"""README.md stays a short map: a few screens, links that land, a folder table of the tree.

mkdocs build --strict checks the links of the docs site; the README is not part of
the site, so its links into docs/ (pages and their anchors) are checked here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.folder_tables import folder_rows

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
LINK = re.compile(r"\]\((?!https?://|#)([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor MkDocs' toc extension gives a heading (its default slugify)."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(page: Path) -> set[str]:
    body = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return {slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", body, flags=re.MULTILINE)}


def test_the_readme_fits_on_a_few_screens() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_every_relative_link_of_the_readme_lands() -> None:
    for target in LINK.findall(README.read_text()):
        path, _, fragment = target.partition("#")
        assert (REPO / path).exists(), f"README links to {path}, which does not exist"
        if fragment and path.endswith(".md"):
            assert fragment in anchors(REPO / path), f"no heading #{fragment} in {path}"


def test_the_folder_table_names_what_exists_and_every_package() -> None:
    named = [folder for folder, _ in folder_rows(README)]
    for folder in named:
        assert (REPO / folder).is_dir(), f"README names {folder}: missing"
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    top = {f"{path.split('/', 1)[0]}/" for path in tracked if "/" in path and path[0] != "."}
    subpackages = {f"polar/{p.parent.name}/" for p in (REPO / "polar").glob("*/__init__.py")}
    missing = sorted((top | subpackages) - set(named))
    assert not missing, f"the README's folder table leaves out {missing}"

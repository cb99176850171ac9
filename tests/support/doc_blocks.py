"""The docs' titled code blocks, for tests that run them as written.

A runnable example is a fenced block with a title (```bash title="quick tour"```) in
README.md or a page of docs/; a title names one block across all of them.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(
    r"^```(?P<lang>\w+)[^\n]*?title=\"(?P<title>[^\"]+)\"[^\n]*\n(?P<body>.*?)^```\s*$",
    re.MULTILINE | re.DOTALL,
)


def doc_blocks() -> dict[str, tuple[str, str]]:
    """{title: (language, code)} of the titled fenced blocks of README.md and docs/*.md."""
    found: dict[str, tuple[str, str]] = {}
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for match in FENCE.finditer(page.read_text()):
            title = match["title"]
            assert title not in found, f"two blocks titled {title!r} (one is in {page.name})"
            found[title] = (match["lang"], match["body"])
    return found


def doc_block(title: str, lang: str) -> str:
    """The code of the block titled `title`, which must be a `lang` block."""
    blocks = doc_blocks()
    assert title in blocks, f"no block titled {title!r} in README.md or docs/ ({sorted(blocks)})"
    got_lang, body = blocks[title]
    assert got_lang == lang, f"{title!r} is a {got_lang} block"
    return body


def filled(code: str, placeholders: dict[str, str]) -> str:
    """`code` with each placeholder (a path the reader replaces) put in; each must occur."""
    for placeholder, value in placeholders.items():
        assert placeholder in code, f"{placeholder!r} is no longer in the block:\n{code}"
        code = code.replace(placeholder, value)
    return code

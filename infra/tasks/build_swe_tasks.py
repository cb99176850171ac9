"""Build the bundled SWE-style tasks: three small purpose-made Python repositories.

    python infra/tasks/build_swe_tasks.py [OUT]        # default OUT: .polar/tasks/swe

writes, offline and deterministically (fixed author, committer and dates, no
user or system git config, so the base commits are the same everywhere):

    OUT/repos/polar-tasks__<name>/       a git repository at its base commit (a bug in it)
    OUT/instances.jsonl                  the SWE-bench-format instances (== examples/swe/)
    OUT/patches/<instance_id>/gold.patch      the fix (the instance's `patch`)
    OUT/patches/<instance_id>/test.patch      the FAIL_TO_PASS tests (its `test_patch`)
    OUT/patches/<instance_id>/wrong.patch     a fix that leaves a FAIL_TO_PASS test failing
    OUT/patches/<instance_id>/breaking.patch  a fix that passes FAIL_TO_PASS, breaks PASS_TO_PASS

Tasks: `polar.tasks.swe.instance_to_task(instance, harness=..., source_root=OUT / "repos")`.
Python's standard library only (runs before the project's venv exists).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / ".polar" / "tasks" / "swe"
OWNER = "polar-tasks"
DATE = "2024-01-01T00:00:00+00:00"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Polar Tasks",
    "GIT_AUTHOR_EMAIL": "tasks@polar.invalid",
    "GIT_AUTHOR_DATE": DATE,
    "GIT_COMMITTER_NAME": "Polar Tasks",
    "GIT_COMMITTER_EMAIL": "tasks@polar.invalid",
    "GIT_COMMITTER_DATE": DATE,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "TZ": "UTC",
}


def pyproject(name: str) -> str:
    return f"""[project]
name = "{name}"
version = "0.1.0"
requires-python = ">=3.9"

[tool.pytest.ini_options]
pythonpath = ["."]
testpaths = ["tests"]
"""


# --------------------------------------------------------------------------- textkit

SLUG = '''"""URL slugs and short labels."""

import re
import unicodedata


def slugify(text: str, sep: str = "-") -> str:
    """Lower-case ASCII slug of `text`: words joined by `sep`."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]", sep, text.lower())


def truncate(text: str, width: int, ellipsis: str = "...") -> str:
    """`text` cut to at most `width` characters, ending with `ellipsis` when cut."""
    if len(text) <= width:
        return text
    return text[: max(0, width - len(ellipsis))] + ellipsis
'''

SLUG_TESTS = """from textkit import slugify, truncate


def test_slugify_lowercases():
    assert slugify("Hello") == "hello"


def test_slugify_joins_words():
    assert slugify("hello world") == "hello-world"


def test_slugify_custom_separator():
    assert slugify("hello world", sep="_") == "hello_world"


def test_slugify_strips_accents():
    assert slugify("Caf\\u00e9") == "cafe"


def test_truncate_short_text_unchanged():
    assert truncate("abc", 5) == "abc"


def test_truncate_long_text():
    assert truncate("abcdefgh", 6) == "abc..."
"""

SLUG_NEW_TESTS = """

def test_slugify_collapses_separators():
    assert slugify("rock  &  roll") == "rock-roll"
    assert slugify("a, b") == "a-b"


def test_slugify_strips_separators():
    assert slugify("  Hello, World!  ") == "hello-world"
    assert slugify("--x--") == "x"
"""

TEXTKIT = {
    "name": "textkit",
    "problem_statement": """slugify leaves repeated and trailing separators

`slugify("Hello, World!")` returns `"hello--world-"`; I expected `"hello-world"`.

A run of characters that are not letters or digits should become a single
separator, and a slug should never start or end with a separator. The `sep`
argument must keep working (`slugify("a b", sep="_") == "a_b"`).
""",
    "files": {
        "pyproject.toml": pyproject("textkit"),
        "README.md": "# textkit\n\nSmall text helpers: `slugify`, `truncate`.\n",
        "textkit/__init__.py": 'from textkit.slug import slugify, truncate\n\n__all__ = ["slugify", "truncate"]\n',  # noqa: E501
        "textkit/slug.py": SLUG,
        "tests/test_slug.py": SLUG_TESTS,
    },
    "gold": {
        "textkit/slug.py": SLUG.replace(
            'return re.sub(r"[^a-z0-9]", sep, text.lower())',
            'return re.sub(r"[^a-z0-9]+", sep, text.lower()).strip(sep)',
        )
    },
    "wrong": {  # collapses runs but leaves separators at the ends
        "textkit/slug.py": SLUG.replace(
            'return re.sub(r"[^a-z0-9]", sep, text.lower())',
            'return re.sub(r"[^a-z0-9]+", sep, text.lower())',
        )
    },
    "breaking": {  # fixes the slugs but forgets `sep`
        "textkit/slug.py": SLUG.replace(
            'return re.sub(r"[^a-z0-9]", sep, text.lower())',
            'return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")',
        )
    },
    "tests": {"tests/test_slug.py": SLUG_TESTS + SLUG_NEW_TESTS},
    "FAIL_TO_PASS": [
        "tests/test_slug.py::test_slugify_collapses_separators",
        "tests/test_slug.py::test_slugify_strips_separators",
    ],
    "PASS_TO_PASS": [
        "tests/test_slug.py::test_slugify_lowercases",
        "tests/test_slug.py::test_slugify_joins_words",
        "tests/test_slug.py::test_slugify_custom_separator",
        "tests/test_slug.py::test_slugify_strips_accents",
        "tests/test_slug.py::test_truncate_short_text_unchanged",
        "tests/test_slug.py::test_truncate_long_text",
    ],
}

# --------------------------------------------------------------------------- intervals

CORE = '''"""Closed intervals [start, end] of integers."""


def merge(intervals):
    """Merge overlapping or touching intervals into sorted, disjoint ones."""
    result = []
    for start, end in sorted(intervals):
        if start > end:
            raise ValueError(f"reversed interval ({start}, {end})")
        if result and start < result[-1][1]:
            result[-1] = (result[-1][0], max(result[-1][1], end))
        else:
            result.append((start, end))
    return result


def total_length(intervals):
    """The length covered by `intervals`, overlaps counted once."""
    return sum(end - start for start, end in merge(intervals))
'''

CORE_TESTS = """import pytest

from intervals import merge, total_length


def test_merge_overlapping():
    assert merge([(1, 4), (2, 6)]) == [(1, 6)]


def test_merge_disjoint():
    assert merge([(1, 2), (3, 4)]) == [(1, 2), (3, 4)]


def test_merge_unsorted():
    assert merge([(8, 9), (1, 4), (2, 3)]) == [(1, 4), (8, 9)]


def test_merge_empty():
    assert merge([]) == []


def test_merge_rejects_reversed():
    with pytest.raises(ValueError):
        merge([(3, 1)])


def test_total_length():
    assert total_length([(0, 4), (2, 6), (10, 11)]) == 7
"""

TOUCHING_TESTS = """from intervals import merge


def test_merge_touching():
    assert merge([(1, 3), (3, 5)]) == [(1, 5)]


def test_merge_touching_chain():
    assert merge([(5, 6), (1, 3), (3, 5)]) == [(1, 6)]
"""

INTERVALS = {
    "name": "intervals",
    "problem_statement": """merge() does not merge touching intervals

The docstring of `intervals.merge` says it merges overlapping *or touching*
intervals, but `merge([(1, 3), (3, 5)])` returns `[(1, 3), (3, 5)]` instead of
`[(1, 5)]`. Intervals that only share an end point should be merged; intervals
with a gap between them, like `(1, 2)` and `(3, 4)`, must stay apart.
""",
    "files": {
        "pyproject.toml": pyproject("intervals"),
        "README.md": "# intervals\n\nMerging closed integer intervals.\n",
        "intervals/__init__.py": 'from intervals.core import merge, total_length\n\n__all__ = ["merge", "total_length"]\n',  # noqa: E501
        "intervals/core.py": CORE,
        "tests/test_core.py": CORE_TESTS,
    },
    "gold": {
        "intervals/core.py": CORE.replace(
            "if result and start < result[-1][1]:", "if result and start <= result[-1][1]:"
        )
    },
    "wrong": {  # "fixes" the docstring instead of the code
        "intervals/core.py": CORE.replace(
            "Merge overlapping or touching intervals", "Merge overlapping intervals"
        )
    },
    "breaking": {  # merges touching intervals, and adjacent integers too
        "intervals/core.py": CORE.replace(
            "if result and start < result[-1][1]:", "if result and start <= result[-1][1] + 1:"
        )
    },
    "tests": {"tests/test_touching.py": TOUCHING_TESTS},
    "FAIL_TO_PASS": [
        "tests/test_touching.py::test_merge_touching",
        "tests/test_touching.py::test_merge_touching_chain",
    ],
    "PASS_TO_PASS": [
        "tests/test_core.py::test_merge_overlapping",
        "tests/test_core.py::test_merge_disjoint",
        "tests/test_core.py::test_merge_unsorted",
        "tests/test_core.py::test_merge_empty",
        "tests/test_core.py::test_merge_rejects_reversed",
        "tests/test_core.py::test_total_length",
    ],
}

# --------------------------------------------------------------------------- numerals

VALUES_BUGGY = (
    '_VALUES = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]'
)
VALUES_FIXED = """_VALUES = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]"""
VALUES_PARTIAL = """_VALUES = [
    (1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"),
    (1, "I"),
]"""
RANGE_CHECK = """    if not 0 < n < 4000:
        raise ValueError(f"{n} is out of range (1..3999)")"""

CONVERT = f'''"""Roman numerals."""

{VALUES_BUGGY}
_DIGITS = {{"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}}


def to_roman(n: int) -> str:
    """`n` (1..3999) in Roman numerals."""
{RANGE_CHECK}
    out = []
    for value, symbol in _VALUES:
        count, n = divmod(n, value)
        out.append(symbol * count)
    return "".join(out)


def from_roman(s: str) -> int:
    """The value of the Roman numeral `s`."""
    total = 0
    for i, ch in enumerate(s):
        value = _DIGITS[ch]
        if i + 1 < len(s) and _DIGITS[s[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
'''

CONVERT_TESTS = """import pytest

from numerals import from_roman, to_roman


def test_to_roman_additive():
    assert [to_roman(n) for n in (1, 3, 8, 2023)] == ["I", "III", "VIII", "MMXXIII"]


def test_from_roman():
    assert from_roman("IV") == 4
    assert from_roman("MCMXCIV") == 1994


@pytest.mark.parametrize("n", [0, -1, 4000])
def test_to_roman_rejects_out_of_range(n):
    with pytest.raises(ValueError):
        to_roman(n)
"""

CONVERT_NEW_TESTS = """

def test_to_roman_subtractive():
    cases = {4: "IV", 9: "IX", 40: "XL", 90: "XC", 400: "CD", 900: "CM", 1994: "MCMXCIV"}
    assert {n: to_roman(n) for n in cases} == cases


def test_no_symbol_four_times():
    numerals = [to_roman(n) for n in range(1, 4000)]
    assert not [r for r in numerals if any(c * 4 in r for c in "IXCM")]
"""

NUMERALS = {
    "name": "numerals",
    "problem_statement": """to_roman writes IIII instead of IV

`numerals.to_roman(4)` returns `"IIII"` and `to_roman(1994)` returns
`"MDCCCCLXXXXIIII"`. Roman numerals use the subtractive forms IV, IX, XL, XC,
CD and CM: `to_roman(1994)` should be `"MCMXCIV"`, and no symbol should ever
appear four times in a row. Numbers outside 1..3999 must still raise ValueError.
""",
    "files": {
        "pyproject.toml": pyproject("numerals"),
        "README.md": "# numerals\n\nRoman numerals: `to_roman`, `from_roman`.\n",
        "numerals/__init__.py": 'from numerals.convert import from_roman, to_roman\n\n__all__ = ["from_roman", "to_roman"]\n',  # noqa: E501
        "numerals/convert.py": CONVERT,
        "tests/test_convert.py": CONVERT_TESTS,
    },
    "gold": {"numerals/convert.py": CONVERT.replace(VALUES_BUGGY, VALUES_FIXED)},
    "wrong": {"numerals/convert.py": CONVERT.replace(VALUES_BUGGY, VALUES_PARTIAL)},
    "breaking": {  # the right table, but 0 and negatives now give "" instead of raising
        "numerals/convert.py": CONVERT.replace(VALUES_BUGGY, VALUES_FIXED).replace(
            RANGE_CHECK,
            """    if n >= 4000:
        raise ValueError(f"{n} is out of range (1..3999)")""",
        )
    },
    "tests": {"tests/test_convert.py": CONVERT_TESTS + CONVERT_NEW_TESTS},
    "FAIL_TO_PASS": [
        "tests/test_convert.py::test_to_roman_subtractive",
        "tests/test_convert.py::test_no_symbol_four_times",
    ],
    "PASS_TO_PASS": [
        "tests/test_convert.py::test_to_roman_additive",
        "tests/test_convert.py::test_from_roman",
        "tests/test_convert.py::test_to_roman_rejects_out_of_range[0]",
        "tests/test_convert.py::test_to_roman_rejects_out_of_range[-1]",
        "tests/test_convert.py::test_to_roman_rejects_out_of_range[4000]",
    ],
}

TASKS = [TEXTKIT, INTERVALS, NUMERALS]


# --------------------------------------------------------------------------- build


def git(cwd: Path, *args: str) -> str:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **GIT_ENV}
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {cwd}: {proc.stderr.strip()}")
    return proc.stdout


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
        path.chmod(0o644)


def diff_of(repo: Path, files: dict[str, str]) -> str:
    """The patch that turns the base commit into base + `files`; the repo is left clean."""
    write_files(repo, files)
    git(repo, "add", "-A")
    patch = git(repo, "diff", "--cached", "--no-color", "--no-ext-diff", "--no-renames")
    git(repo, "reset", "--quiet", "--hard", "HEAD")
    git(repo, "clean", "-fdq")
    return patch


def build_task(task: dict, out: Path) -> dict:
    repo_name = f"{OWNER}/{task['name']}"
    repo = out / "repos" / repo_name.replace("/", "__")
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch=main")
    write_files(repo, task["files"])
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "--no-gpg-sign", "-m", f"{task['name']} 0.1.0")
    base_commit = git(repo, "rev-parse", "HEAD").strip()
    instance_id = f"{OWNER}__{task['name']}-1"
    patches = {kind: diff_of(repo, task[kind]) for kind in ("gold", "wrong", "breaking")}
    patches["test"] = diff_of(repo, task["tests"])
    pdir = out / "patches" / instance_id
    pdir.mkdir(parents=True, exist_ok=True)
    for kind, text in patches.items():
        (pdir / f"{kind}.patch").write_text(text, encoding="utf-8", newline="\n")
    return {
        "instance_id": instance_id,
        "repo": repo_name,
        "base_commit": base_commit,
        "problem_statement": task["problem_statement"],
        "patch": patches["gold"],
        "test_patch": patches["test"],
        "FAIL_TO_PASS": task["FAIL_TO_PASS"],
        "PASS_TO_PASS": task["PASS_TO_PASS"],
        "version": "0.1",
        "created_at": DATE,
    }


def build(out: Path = DEFAULT_OUT) -> Path:
    """Build every bundled task under `out`; returns the instances JSONL."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    instances = [build_task(task, out) for task in TASKS]
    path = out / "instances.jsonl"
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in instances))
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    print(build(target))

"""The largest product modules and functions, and the limits they keep.

    .venv/bin/python scripts/code_sizes.py           # the 10 largest modules and functions
    .venv/bin/python scripts/code_sizes.py --top 30  # more rows
    .venv/bin/python scripts/code_sizes.py --check   # exit 1 when a limit is broken

A product module (under app/, activities/, proxy/, workflows/, polar/) has at most
`MAX_MODULE_LINES` lines and a function at most `MAX_FUNCTION_LINES` (its `def` to its last
line). tests/unit/test_code_sizes.py keeps the limits.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("app", "activities", "proxy", "workflows", "polar")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


@dataclass(frozen=True)
class Sized:
    """A module or function and its length in lines."""

    lines: int
    where: str


def product_modules(root: Path = REPO) -> list[Path]:
    """Every Python file of the product packages (no caches, no node_modules)."""
    return sorted(
        path
        for top in PRODUCT
        for path in (root / top).rglob("*.py")
        if not {"__pycache__", "node_modules"} & set(path.parts)
    )


def measure(root: Path = REPO) -> tuple[list[Sized], list[Sized]]:
    """(modules, functions), each with its length in lines, largest first."""
    modules, functions = [], []
    for path in product_modules(root):
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        modules.append(Sized(text.count("\n"), rel))
        for node in ast.walk(ast.parse(text, filename=rel)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                functions.append(Sized(length, f"{rel}:{node.lineno} {node.name}"))
    return sorted(modules, reverse=True, key=lambda s: s.lines), sorted(
        functions, reverse=True, key=lambda s: s.lines
    )


def too_large(root: Path = REPO) -> list[str]:
    """Each module and function past its limit, as a line of text."""
    modules, functions = measure(root)
    past = [(m, MAX_MODULE_LINES) for m in modules if m.lines > MAX_MODULE_LINES]
    past += [(f, MAX_FUNCTION_LINES) for f in functions if f.lines > MAX_FUNCTION_LINES]
    return [f"{s.where}: {s.lines} lines (> {limit})" for s, limit in past]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--top", type=int, default=10, help="rows of each list")
    parser.add_argument("--check", action="store_true", help="only the limits; exit 1 if broken")
    args = parser.parse_args(argv)
    broken = too_large()
    if not args.check:
        modules, functions = measure()
        lines = [m.lines for m in modules]
        print(
            f"{len(modules)} modules, {sum(lines)} lines, median {statistics.median(lines)}, "
            f"{len(functions)} functions"
        )
        print("largest modules:")
        print("\n".join(f"  {m.lines:5d} {m.where}" for m in modules[: args.top]))
        print("longest functions:")
        print("\n".join(f"  {f.lines:5d} {f.where}" for f in functions[: args.top]))
    if broken:
        print("past the limits:\n  " + "\n  ".join(broken))
        return 1
    print(f"limits kept: modules <= {MAX_MODULE_LINES} lines, functions <= {MAX_FUNCTION_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

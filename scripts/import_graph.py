"""The import graph between Polar's top-level packages, and the layering rules it must keep.

    .venv/bin/python scripts/import_graph.py            # edges, the modules behind each, violations
    .venv/bin/python scripts/import_graph.py --edges    # edges and counts only
    .venv/bin/python scripts/import_graph.py --quiet    # violations only (exit 1 when any)

Every `import`/`from ... import` of the repository's Python files is read with
`ast` (nested ones, `TYPE_CHECKING` ones and relative ones too; nothing is
imported or run). Each module belongs to one layer, top to bottom:

    app          the top: the CLI, the dev stack, the task audit; may import every product package
    activities   the worker side: activities, runtimes, harnesses, evaluators, the worker
    workflows    Temporal workflows (deterministic; they name activities, never import them)
    proxy        the gateway
    polar        the core: contracts, settings, storage, builders, providers, the task model
                 (polar.tasks) and the trainer-facing client (polar.client: SDK, export, generate)
    bench, scripts, examples, infra: consumers of the product packages
    tests.support  the helpers of tests and benchmarks (ports, stacks, scripted backends)
    tests        the tests

The rules (`ALLOWED`): the core imports only itself; the gateway and the
workflows import only the core; the worker side imports the core and the
workflows (the worker registers them; queues and stages are theirs); the app
imports every product package and no product package imports the app (the
console script names the CLI; the dev stack starts `python -m app.cli ...` as a
process, not an import); consumers import the product and
`tests.support`, never a test module. Exit status 1 when an import breaks a
rule, 0 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CORE = ("polar", "proxy", "workflows", "activities")
PRODUCT = ("app", *CORE)
CONSUMERS = ("bench", "scripts", "examples", "infra")
SUPPORT = "tests.support"
LAYERS = (*PRODUCT, *CONSUMERS, SUPPORT, "tests")

ALLOWED: dict[str, frozenset[str]] = {
    "polar": frozenset({"polar"}),
    "proxy": frozenset({"polar", "proxy"}),
    "workflows": frozenset({"polar", "workflows"}),
    "activities": frozenset({"polar", "workflows", "activities"}),
    "app": frozenset(PRODUCT),
    **{consumer: frozenset({*PRODUCT, *CONSUMERS, SUPPORT}) for consumer in CONSUMERS},
    SUPPORT: frozenset(LAYERS),
    "tests": frozenset(LAYERS),
}
"""Which layers each layer may import (third-party modules are not layers)."""

SKIP_DIRS = {"node_modules", "__pycache__", "site-packages"}


@dataclass(frozen=True)
class Import:
    """One import statement's target: `importer` (a module) imports `target` (a module)."""

    importer: str
    target: str
    line: int


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to; None for a third-party or stdlib module."""
    if module == SUPPORT or module.startswith(SUPPORT + "."):
        return SUPPORT
    top = module.split(".", 1)[0]
    return top if top in LAYERS else None


def module_name(path: Path, root: Path = REPO) -> str:
    """`app/cli.py` -> `app.cli`; `polar/__init__.py` -> `polar`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_files(root: Path = REPO) -> Iterator[Path]:
    """The repository's own Python files of every layer (no venvs, no node_modules)."""
    for top in sorted({layer.split(".", 1)[0] for layer in LAYERS}):
        base = root / top
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(root).parts
            if any(part.startswith(".") or part in SKIP_DIRS for part in rel):
                continue
            yield path


def imports_of(path: Path, root: Path = REPO) -> Iterator[Import]:
    """Every module `path` imports (relative imports resolved against its package)."""
    importer = module_name(path, root)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            # `from app import cli` imports the module app.cli
            for alias in node.names:
                yield Import(importer, f"{module}.{alias.name}", node.lineno)


@dataclass
class Graph:
    """Edges between layers: `(from_layer, to_layer) -> {importer module: {target modules}}`."""

    edges: dict[tuple[str, str], dict[str, set[str]]]
    violations: list[tuple[Import, str, str]]

    def lines(self, modules: bool = True) -> list[str]:
        """The edges with their counts; with `modules`, the importing modules of each
        edge between two layers and what each imports there."""
        out = ["import graph between top-level packages (layer -> layer: module pairs)"]
        for (src, dst), by_module in sorted(self.edges.items()):
            pairs = sum(len(targets) for targets in by_module.values())
            out.append(f"  {src} -> {dst}: {pairs} ({len(by_module)} modules)")
            if modules and src != dst:
                for importer, targets in sorted(by_module.items()):
                    out.append(f"      {importer}: {', '.join(sorted(targets))}")
        return out

    def violation_lines(self) -> list[str]:
        return [
            f"  {imp.importer}:{imp.line} imports {imp.target} ({src} may not import {dst})"
            for imp, src, dst in self.violations
        ]


def build_graph(root: Path = REPO) -> Graph:
    """Read every file's imports; sort them into layer edges and rule violations."""
    edges: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    violations: list[tuple[Import, str, str]] = []
    seen: set[Import] = set()
    for path in python_files(root):
        for imp in imports_of(path, root):
            src = layer_of(imp.importer)
            dst = layer_of(imp.target)
            if src is None or dst is None:
                continue
            target = _module_of(imp.target, root)
            edges[(src, dst)][imp.importer].add(target)
            broken = Import(imp.importer, target, imp.line)
            if dst not in ALLOWED[src] and broken not in seen:
                seen.add(broken)
                violations.append((broken, src, dst))
    return Graph(edges={k: dict(v) for k, v in edges.items()}, violations=violations)


def _module_of(target: str, root: Path) -> str:
    """The longest prefix of `target` that is a module or package file under `root`
    (`from polar.settings import Settings` -> `polar.settings`)."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:n])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return ".".join(parts[:n])
    return parts[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quiet", action="store_true", help="print only the violations")
    parser.add_argument("--edges", action="store_true", help="edges and counts, no modules")
    parser.add_argument("--root", type=Path, default=REPO, help="repository root")
    args = parser.parse_args(argv)
    graph = build_graph(args.root)
    if not args.quiet:
        print("\n".join(graph.lines(modules=not args.edges)))
    if graph.violations:
        print(f"{len(graph.violations)} layering violations:")
        print("\n".join(graph.violation_lines()))
        return 1
    print("layering: no violations")
    return 0


if __name__ == "__main__":
    sys.exit(main())

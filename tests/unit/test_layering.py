"""Imports point down: the layering rules of scripts/import_graph.py hold for the repository.

The app (`app`: CLI, dev stack, audit) is the top; the core (`polar`) imports
nothing above it, the gateway and the workflows only the core, the worker side
the core and the workflows, no product package imports the app, and benchmarks,
scripts and examples import `tests.support` but no test module. The checker
itself is shown to catch each kind of violation on a small made-up tree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import REPO
from tests.support.scripts import load_script

SCRIPT = REPO / "scripts" / "import_graph.py"


@pytest.fixture(scope="module")
def import_graph() -> ModuleType:
    return load_script("import_graph")


def test_repository_keeps_the_layering(import_graph: ModuleType) -> None:
    graph = import_graph.build_graph(REPO)
    assert not graph.violations, "\n".join(graph.violation_lines())
    # the graph is read at all: the known downward edges are there
    for edge in [("app", "proxy"), ("proxy", "polar"), ("activities", "workflows")]:
        assert edge in graph.edges, sorted(graph.edges)
    assert not any(src == "bench" and dst == "tests" for src, dst in graph.edges)


def test_script_exits_zero_and_prints_the_graph() -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--edges"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "app -> proxy:" in run.stdout
    assert "layering: no violations" in run.stdout


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    ("rel", "source", "broken"),
    [
        ("polar/core.py", "from proxy.app import create_app\n", "polar may not import proxy"),
        ("polar/core.py", "import workflows.session\n", "polar may not import workflows"),
        ("polar/core.py", "from app import cli\n", "polar may not import app"),
        ("polar/core.py", "import activities.worker\n", "polar may not import activities"),
        ("proxy/app.py", "from activities import worker\n", "proxy may not import activities"),
        ("proxy/app.py", "import app.cli\n", "proxy may not import app"),
        ("workflows/w.py", "from activities.x import y\n", "workflows may not import activities"),
        ("activities/a.py", "from proxy import app\n", "activities may not import proxy"),
        ("activities/a.py", "from app.cli import app\n", "activities may not import app"),
        ("bench/b.py", "from tests.integration import t\n", "bench may not import tests"),
        ("examples/e.py", "import tests.conftest\n", "examples may not import tests"),
        ("workflows/w.py", "from app import devstack\n", "workflows may not import app"),
        ("polar/sub/m.py", "from ..x import y\nimport app\n", "polar may not import app"),
    ],
)
def test_checker_catches_a_violation(
    import_graph: ModuleType, tmp_path: Path, rel: str, source: str, broken: str
) -> None:
    for package in ("polar", "polar/sub", "proxy", "workflows", "activities", "bench", "tests"):
        write(tmp_path, f"{package}/__init__.py", "")
    write(tmp_path, "app/cli.py", "import proxy.app\nimport activities\nimport workflows\n")
    write(tmp_path, rel, source)
    graph = import_graph.build_graph(tmp_path)
    lines = graph.violation_lines()
    assert len(lines) == 1 and broken in lines[0], lines
    assert import_graph.main(["--root", str(tmp_path), "--quiet"]) == 1


def test_cli_may_import_everything_and_tests_may_import_the_cli(
    import_graph: ModuleType, tmp_path: Path
) -> None:
    for package in ("polar", "proxy", "workflows", "activities", "tests"):
        write(tmp_path, f"{package}/__init__.py", "")
    write(tmp_path, "app/cli.py", "import proxy\nimport activities\nimport workflows\n")
    write(tmp_path, "tests/test_x.py", "from app.cli import app\nfrom bench import x\n")
    write(tmp_path, "activities/w.py", "from workflows import session\nfrom polar import ids\n")
    graph = import_graph.build_graph(tmp_path)
    assert not graph.violations, graph.violation_lines()
    assert ("tests", "app") in graph.edges

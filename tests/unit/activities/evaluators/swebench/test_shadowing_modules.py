"""Patch files that would shadow a module the runner or its plugins import are found.

The importable names come from the runner's own probe (`pytest_runner.py probe`), run here
with this interpreter (which has pytest, pluggy, packaging, attrs and iniconfig) in a
workspace of its own, as the evaluator runs it in its runtime before the patch lands. Every
row of the issue is checked: `iniconfig.py`, `pluggy.py`, a `packaging/` and an `attr/`
package, and stdlib modules pytest loads late (`doctest`, `pdb`, `unittest`), at the root or
in a folder that is no package (pytest may put it on sys.path); files inside a package, the
repository's own modules and names nothing imports are kept.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from activities.evaluators import pytest_runner
from activities.evaluators.swebench import shadowing_files

BASE = [
    "setup.py",
    "mypkg/__init__.py",
    "mypkg/core.py",
    "tests/test_core.py",
    "vendor/packaging/__init__.py",
]


@pytest.fixture(scope="module")
def importable(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The probe's names for this interpreter, seen from a workspace holding the base files
    (which it must not list: the workspace is not where modules come from)."""
    root = tmp_path_factory.mktemp("probe")
    workspace, folder = root / "ws", root / "grading"
    folder.mkdir()
    for f in [*BASE, "mymodule.py"]:
        (workspace / f).parent.mkdir(parents=True, exist_ok=True)
        (workspace / f).write_text("")
    subprocess.run(
        [sys.executable, "-I", pytest_runner.__file__, "probe", str(folder), "--", sys.executable],
        cwd=workspace,
        check=True,
    )
    return set(json.loads((folder / "importable.json").read_text()))


def test_the_probe_lists_pytests_dependencies_and_the_stdlib(importable: set[str]) -> None:
    for name in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "attr", "doctest"):
        assert name in importable, name
    assert "mymodule" not in importable  # the workspace's own files are not importable names


@pytest.mark.parametrize(
    ("path", "module"),
    [
        ("iniconfig.py", "iniconfig"),
        ("pluggy.py", "pluggy"),
        ("pluggy/__init__.py", "pluggy"),
        ("packaging/__init__.py", "packaging"),
        ("packaging/version.py", "packaging"),
        ("attr/__init__.py", "attr"),
        ("attr/_make.py", "attr"),
        ("doctest.py", "doctest"),
        ("pdb.py", "pdb"),
        ("unittest/__init__.py", "unittest"),
        ("src/pluggy.py", "pluggy"),  # src/ is no package: pytest may put it on sys.path
        ("tests/packaging/__init__.py", "packaging"),  # tests/ is no package either
    ],
)
def test_a_patch_file_shadowing_an_importable_module_is_found(
    importable: set[str], path: str, module: str
) -> None:
    assert shadowing_files([path], BASE, importable) == {path: module}


@pytest.mark.parametrize(
    "path",
    [
        "mypkg/pluggy.py",  # inside a package: imported as mypkg.pluggy
        "mypkg/attr/__init__.py",
        "vendor/packaging/version.py",  # the repository's own packaging/ at base
        "mymodule.py",  # nothing outside the workspace is named so
        "setup.py",  # at base already: a change, not an added shadow
        "pluggy.txt",  # not a module
    ],
)
def test_files_that_shadow_nothing_are_kept(importable: set[str], path: str) -> None:
    assert shadowing_files([path], BASE, importable) == {}

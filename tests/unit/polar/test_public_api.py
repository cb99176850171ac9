"""`from polar import ...`: the public names, pinned, each the object its module defines, and
`import polar` loading none of them."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import polar

PUBLIC_API = [
    "BuilderSpec",
    "ClientSettings",
    "DirSource",
    "EvaluatorSpec",
    "GitSource",
    "Group",
    "HarnessSpec",
    "OutcomeClass",
    "PolarClient",
    "RuntimeSpec",
    "SessionResult",
    "SessionStatus",
    "TaskResult",
    "TaskRun",
    "TaskSpec",
    "TaskStatus",
    "Timeouts",
    "Trace",
    "TraceProvenance",
    "Verdict",
    "task_verdict",
]


def test_the_public_names_are_pinned() -> None:
    assert polar.__all__ == PUBLIC_API
    assert sorted(polar.PUBLIC_NAMES) == PUBLIC_API


@pytest.mark.parametrize("name", PUBLIC_API)
def test_each_public_name_is_its_modules_own(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from polar import {name}", namespace)
    home = importlib.import_module(polar.PUBLIC_NAMES[name])
    assert namespace[name] is getattr(home, name)
    assert name in dir(polar)


def test_a_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from polar import *", namespace)
    assert set(PUBLIC_API) <= set(namespace)


def test_an_unknown_name_is_an_attribute_error_and_submodules_still_import() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        polar.no_such_name  # noqa: B018
    namespace: dict[str, object] = {}
    exec("from polar import ids", namespace)  # a submodule, through the package
    assert namespace["ids"] is importlib.import_module("polar.ids")


def test_import_polar_stays_light() -> None:
    code = (
        "import sys, polar; "
        "print(sorted(m for m in sys.modules if m.startswith(('polar.', 'temporalio', "
        "'pydantic'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"

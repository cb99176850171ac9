"""Load one of the checkout's scripts (scripts/NAME.py) as a module, for tests of its
functions."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support.paths import REPO


def load_script(name: str) -> ModuleType:
    """scripts/`name`.py as the module `name` (registered, so its dataclasses resolve)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

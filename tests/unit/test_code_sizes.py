"""No product module over 500 lines, no function over 80 (scripts/code_sizes.py); the check
itself is shown to catch both on a made-up tree."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import REPO


@pytest.fixture(scope="module")
def code_sizes() -> ModuleType:
    spec = importlib.util.spec_from_file_location("code_sizes", REPO / "scripts" / "code_sizes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["code_sizes"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_product_keeps_the_limits(code_sizes: ModuleType) -> None:
    assert code_sizes.too_large() == []
    modules, functions = code_sizes.measure()
    assert len(modules) > 100 and functions  # the tree is read at all


def test_the_check_catches_a_long_module_and_a_long_function(
    code_sizes: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "polar").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    (tmp_path / "polar" / "long.py").write_text(f"def long():\n{body}\n" + "\n" * 420)
    broken = code_sizes.too_large(tmp_path)
    assert len(broken) == 2, broken
    assert "polar/long.py: 506 lines" in broken[0] and "long: 86 lines" in broken[1]

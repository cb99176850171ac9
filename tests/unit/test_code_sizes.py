"""No product module over 500 lines, no function over 80 (scripts/code_sizes.py); the check
itself is shown to catch both on a made-up tree."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def code_sizes() -> ModuleType:
    return load_script("code_sizes")


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

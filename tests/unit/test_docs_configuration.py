"""docs/configuration.md lists exactly the fields of `Settings`, section by section, as the
generator writes them.

The page's table is written by scripts/gen_config_docs.py; a setting added, removed,
renamed or given a new default or description without rerunning it fails here.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from polar.settings import SECTIONS, DevStackSettings, Settings

REPO = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_config_docs", REPO / "scripts" / "gen_config_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_what_the_generator_writes_from_settings() -> None:
    gen = generator()
    page = (REPO / "docs" / "configuration.md").read_text()
    assert gen.render(page) == page, (
        "docs/configuration.md is stale: run scripts/gen_config_docs.py"
    )


def test_every_setting_is_a_row_and_every_row_a_setting() -> None:
    page = (REPO / "docs" / "configuration.md").read_text()
    rows = re.findall(r"^\| `(POLAR_[A-Z0-9_]+)` \|", page, flags=re.MULTILINE)
    gen = generator()
    in_sections = [f"POLAR_{n.upper()}" for section in SECTIONS for n in gen.own_fields(section)]
    assert rows == in_sections
    assert sorted(rows) == sorted(f"POLAR_{name.upper()}" for name in Settings.model_fields)


def test_a_changed_default_or_a_missing_row_makes_the_page_stale() -> None:
    gen = generator()
    page = (REPO / "docs" / "configuration.md").read_text()
    edited = page.replace(
        "| `POLAR_GATEWAY_PORT` | int | `8400` |", "| `POLAR_GATEWAY_PORT` | int | `9999` |"
    )
    assert edited != page
    assert gen.render(edited) == page  # the generator puts Settings' default back
    dropped = re.sub(r"^\| `POLAR_MAX_CHOICES` .*\n", "", page, flags=re.MULTILINE)
    assert dropped != page and gen.render(dropped) == page


def test_a_setting_without_a_description_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = generator()
    field = DevStackSettings.model_fields["vllm_port"]
    monkeypatch.setattr(field, "description", None)
    with pytest.raises(SystemExit, match="vllm_port has no description"):
        gen.table()

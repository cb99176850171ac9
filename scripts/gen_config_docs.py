"""Write the settings tables of docs/configuration.md from the sections of `Settings`
(polar/settings/), one table per section.

    .venv/bin/python scripts/gen_config_docs.py          # rewrite the table in the page
    .venv/bin/python scripts/gen_config_docs.py --check  # exit 1 when the page is stale

The tables sit between two markers in the page; the prose around it is written by
hand. Every field must have a `description` (it is the table's "meaning" column).
tests/unit/test_docs_configuration.py fails when the page and `Settings` differ.
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from polar.settings import SECTIONS, PolarSettings, Settings

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
BEGIN = "<!-- settings table: written by scripts/gen_config_docs.py from Settings; do not edit -->"
END = "<!-- end of the settings table -->"


def type_name(annotation: Any) -> str:
    """`str`, `int`, `Path`, `str or unset`, ..."""
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return " or ".join(type_name(a) for a in args) + " or unset"
    return getattr(annotation, "__name__", str(annotation))


def default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return "computed (see meaning)"
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def own_fields(section: type[PolarSettings]) -> list[str]:
    """The fields `section` itself defines (not those of the sections it builds on)."""
    return [name for name in section.model_fields if name in vars(section)["__annotations__"]]


def section_table(section: type[PolarSettings]) -> str:
    """The heading and markdown table of one section's own settings, in its own order."""
    doc = (section.__doc__ or "").strip().splitlines()[0]
    lines = [f"### `{section.__name__}`", "", doc, ""]
    lines += ["| variable | type | default | meaning |", "|---|---|---|---|"]
    prefix = Settings.model_config.get("env_prefix", "")
    for name in own_fields(section):
        field = section.model_fields[name]
        if not field.description:
            raise SystemExit(f"Settings.{name} has no description: give it one (the docs say it)")
        variable = f"{prefix}{name}".upper()
        lines.append(
            f"| `{variable}` | {type_name(field.annotation)} | {cell(default_text(field))} "
            f"| {cell(field.description)} |"
        )
    return "\n".join(lines)


def table() -> str:
    """Every section's table, in `SECTIONS` order; each setting in exactly one."""
    named = [name for section in SECTIONS for name in own_fields(section)]
    if sorted(named) != sorted(Settings.model_fields):
        raise SystemExit("the sections' own fields are not exactly Settings' fields")
    return "\n\n".join(section_table(section) for section in SECTIONS)


def render(page: str) -> str:
    """`page` with the text between the markers replaced by today's table."""
    head, found, rest = page.partition(BEGIN)
    _, found_end, tail = rest.partition(END)
    if not found or not found_end:
        raise SystemExit(f"{PAGE}: the markers {BEGIN!r} and {END!r} are missing")
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is stale")
    args = parser.parse_args()
    current = PAGE.read_text()
    fresh = render(current)
    if args.check:
        if fresh != current:
            print(f"{PAGE} is stale: run python scripts/gen_config_docs.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())

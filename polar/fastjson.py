"""JSON on the gateway's hot path: orjson, with the standard library for what orjson refuses.

orjson parses and writes JSON several times faster than `json`, but refuses
a few things `json` takes: `NaN`/`Infinity` literals, numbers past a double,
lone UTF-16 surrogates in strings, integers past 64 bits when writing, and
non-string keys. Those fall back to `json`, so any body the gateway used to
accept it still accepts, and parse errors keep `json`'s messages.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """Parse JSON; raises ValueError (json.JSONDecodeError or UnicodeDecodeError) if invalid."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps(value: Any) -> bytes:
    """Compact JSON bytes of `value` (NaN and infinities as `null`, as pydantic writes them)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(_finite(value), separators=(",", ":")).encode()


def _finite(value: Any) -> Any:
    """`value` with non-finite floats as None (the standard library writes them as NaN)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value

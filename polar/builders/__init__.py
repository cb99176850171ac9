"""Trajectory builders: pure functions from a session's CompletionRecords to Traces.

A builder is `Callable[[list[CompletionRecord], BuildContext], BuildOutput]`.
Built-ins are registered by name; a custom builder is named by import path
(`package.module:function`) in the TaskSpec, with its own `config`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from polar.builders.base import BuildContext, BuildOutput
from polar.builders.per_request import build_per_request
from polar.models import CompletionRecord

Builder = Callable[[list[CompletionRecord], BuildContext], BuildOutput]

BUILDERS: dict[str, Builder] = {"per_request": build_per_request}

__all__ = ["BUILDERS", "BuildContext", "BuildOutput", "Builder", "UnknownBuilder", "get_builder"]


class UnknownBuilder(ValueError):
    """The builder name is neither registered nor an importable `module:function`."""


def get_builder(name: str) -> Builder:
    """Look up a registered builder, or import `module:function`."""
    if name in BUILDERS:
        return BUILDERS[name]
    module_name, sep, attr = name.partition(":")
    if not sep:
        raise UnknownBuilder(f"unknown builder {name!r}; registered: {sorted(BUILDERS)}")
    try:
        builder = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UnknownBuilder(f"cannot import builder {name!r}: {exc}") from exc
    if not callable(builder):
        raise UnknownBuilder(f"builder {name!r} is not callable")
    return builder

"""Trajectory builders: pure functions from a session's CompletionRecords to Traces.

A builder is `Callable[[list[CompletionRecord], BuildContext], BuildOutput]`.
Built-ins are registered by name with the pydantic model of their config; a
custom builder is named by import path (`package.module:function`) in the
TaskSpec, with its own free-form `config` (the `reward` key is read for every
builder). See polar/builders/README.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from polar.builders.base import BuildContext, BuilderConfig, BuildOutput, RewardPolicy
from polar.builders.per_request import build_per_request
from polar.builders.prefix_merging import PrefixMergingConfig, build_prefix_merging
from polar.records import CompletionRecord
from polar.registry import Registry, UnknownKind
from polar.tasks.spec import BuilderSpec

Builder = Callable[[list[CompletionRecord], BuildContext], BuildOutput]


class UnknownBuilder(UnknownKind):
    """The builder name is neither registered nor an importable `module:function`."""


BUILDERS: Registry[Builder] = Registry(
    "builder",
    {"per_request": build_per_request, "prefix_merging": build_prefix_merging},
    UnknownBuilder,
)
"""The built-in builders by name (polar/registry.py); a custom one is a `module:function`."""
BUILDER_CONFIGS: Registry[type[BuilderConfig]] = Registry(
    "builder",
    {"per_request": BuilderConfig, "prefix_merging": PrefixMergingConfig},
    UnknownBuilder,
)
"""The config model of each built-in builder (a custom builder's config is free-form)."""

__all__ = [
    "BUILDERS",
    "BUILDER_CONFIGS",
    "BuildContext",
    "BuildOutput",
    "Builder",
    "BuilderConfig",
    "UnknownBuilder",
    "check_builder",
    "get_builder",
    "reward_policy",
    "validate_builder_config",
]


def get_builder(name: str) -> Builder:
    """A registered builder, or the `module:function` imported (UnknownBuilder otherwise)."""
    module_name, sep, attr = name.partition(":")
    if not sep:
        return BUILDERS.get(name)
    try:
        builder = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UnknownBuilder(f"cannot import builder {name!r}: {exc}") from exc
    if not callable(builder):
        raise UnknownBuilder(f"builder {name!r} is not callable")
    return builder


def check_builder(spec: BuilderSpec) -> Builder:
    """The builder `spec` names, with its config checked: the one check, at submit (SDK and
    CLI, before any harness runs) and in the build activity; never in workflow code, so a
    registry change cannot break the replay of old histories.

    UnknownBuilder names `builder.name`; a bad config is a ValueError naming `builder.config`.
    """
    try:
        builder = get_builder(spec.name)
    except UnknownBuilder as exc:
        raise UnknownBuilder(f"builder.name: {exc}", exc.kind, exc.known) from None
    try:
        validate_builder_config(spec.name, spec.config)
    except ValueError as exc:
        raise ValueError(f"builder.config: {exc}") from None
    return builder


def validate_builder_config(name: str, config: dict[str, Any]) -> None:
    """Raise ValueError if a built-in builder's config is invalid (custom ones: `reward` only)."""
    if name in BUILDER_CONFIGS:
        BUILDER_CONFIGS.get(name).model_validate(config)
    else:
        reward_policy(config)


def reward_policy(config: dict[str, Any]) -> RewardPolicy:
    """The `reward` policy a builder config names (default `broadcast`)."""
    policy = config.get("reward", "broadcast")
    if policy not in ("broadcast", "session_normalized"):
        raise ValueError(
            f"builder config 'reward' must be 'broadcast' or 'session_normalized', not {policy!r}"
        )
    return policy

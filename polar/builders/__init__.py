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
from polar.tasks.spec import BuilderSpec

Builder = Callable[[list[CompletionRecord], BuildContext], BuildOutput]

BUILDERS: dict[str, Builder] = {
    "per_request": build_per_request,
    "prefix_merging": build_prefix_merging,
}
BUILDER_CONFIGS: dict[str, type[BuilderConfig]] = {
    "per_request": BuilderConfig,
    "prefix_merging": PrefixMergingConfig,
}

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


def check_builder(spec: BuilderSpec) -> Builder:
    """The builder `spec` names, with its config checked: the one check, at submit (SDK and
    CLI, before any harness runs) and in the build activity; never in workflow code, so a
    registry change cannot break the replay of old histories.

    UnknownBuilder names `builder.name`; a bad config is a ValueError naming `builder.config`.
    """
    try:
        builder = get_builder(spec.name)
    except UnknownBuilder as exc:
        raise UnknownBuilder(f"builder.name: {exc}") from None
    try:
        validate_builder_config(spec.name, spec.config)
    except ValueError as exc:
        raise ValueError(f"builder.config: {exc}") from None
    return builder


def validate_builder_config(name: str, config: dict[str, Any]) -> None:
    """Raise ValueError if a built-in builder's config is invalid (custom ones: `reward` only)."""
    model = BUILDER_CONFIGS.get(name)
    if model is not None:
        model.model_validate(config)
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

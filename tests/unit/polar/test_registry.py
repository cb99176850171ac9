"""The one registry pattern (polar/registry.py) and the registries built on it: runtimes,
harnesses, evaluators, builders, pool kinds and provider APIs all look a kind up the same
way and refuse an unknown one with the same error, naming the kind and the known ones."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from activities.evaluators import EVALUATORS, UnknownEvaluator, get_evaluator
from activities.harnesses import ADAPTERS, UnknownHarness, get_adapter
from activities.runtimes import RUNTIMES, UnknownRuntime, get_runtime
from polar.builders import BUILDER_CONFIGS, BUILDERS, UnknownBuilder, check_builder, get_builder
from polar.providers import PROVIDERS, UnknownProvider, get_provider
from polar.registry import Registry, UnknownKind
from polar.tasks.spec import BuilderSpec
from proxy.pools import POOL_KINDS, PoolError, UnknownPoolKind, parse_pools


class Missing(UnknownKind):
    """A registry's own error."""


def test_a_registry_gives_what_was_registered_and_names_the_known_kinds() -> None:
    shapes: Registry[int] = Registry("shape", {"square": 4}, Missing)
    assert shapes.register("triangle", 3) == 3
    assert shapes.get("square") == 4 and shapes["triangle"] == 3
    assert shapes.kinds() == ("square", "triangle")
    assert list(shapes) == ["square", "triangle"] and len(shapes) == 2
    assert shapes.items() == (("square", 4), ("triangle", 3))
    assert shapes.values() == (4, 3)
    assert "square" in shapes and "circle" not in shapes and ["unhashable"] not in shapes
    with pytest.raises(
        Missing, match=r"^unknown shape 'circle' \(known: square, triangle\)$"
    ) as info:
        shapes.get("circle")
    assert (info.value.kind, info.value.known) == ("circle", ("square", "triangle"))
    # one error for every registry: a LookupError, and a ValueError for input checks
    assert isinstance(info.value, LookupError) and isinstance(info.value, ValueError)
    with pytest.raises(Missing, match=r"unknown shape \['x'\]"):
        shapes.get(["x"])  # type: ignore[arg-type]


def test_a_kind_registers_once_and_is_a_name() -> None:
    shapes: Registry[int] = Registry("shape", {"square": 4})
    with pytest.raises(ValueError, match="shape 'square' is registered already"):
        shapes.register("square", 5)
    assert shapes.get("square") == 4
    with pytest.raises(ValueError, match="non-empty string"):
        shapes.register("", 0)
    with pytest.raises(UnknownKind, match="unknown shape 'circle'"):
        shapes.get("circle")  # the default error is UnknownKind itself


def _registries() -> list[tuple[Registry[Any], type[UnknownKind], Callable[[str], object]]]:
    return [
        (RUNTIMES, UnknownRuntime, lambda kind: get_runtime(kind, Path("/nonexistent"))),
        (ADAPTERS, UnknownHarness, get_adapter),
        (EVALUATORS, UnknownEvaluator, get_evaluator),
        (BUILDERS, UnknownBuilder, get_builder),
        (BUILDER_CONFIGS, UnknownBuilder, BUILDER_CONFIGS.get),
        (POOL_KINDS, UnknownPoolKind, POOL_KINDS.get),
        (PROVIDERS, UnknownProvider, get_provider),
    ]


@pytest.mark.parametrize("index", range(len(_registries())))
def test_every_registry_is_one_and_refuses_an_unknown_kind_alike(index: int) -> None:
    registry, error, lookup = _registries()[index]
    assert isinstance(registry, Registry) and registry.unknown is error
    assert issubclass(error, UnknownKind)
    assert len(registry) > 0
    with pytest.raises(error) as info:
        lookup("no-such-kind")
    message = str(info.value)
    assert (
        message == f"unknown {registry.what} 'no-such-kind' (known: {', '.join(registry.kinds())})"
    )


def test_the_registries_hold_the_kinds_the_specs_name() -> None:
    assert RUNTIMES.kinds() == ("docker", "local", "podman")
    assert ADAPTERS.kinds() == ("claude_code", "codex", "command", "pi", "qwen_code")
    assert set(BUILDERS) == set(BUILDER_CONFIGS) == {"per_request", "prefix_merging"}
    assert POOL_KINDS.kinds() == ("openai", "sglang", "vllm")
    assert PROVIDERS.kinds() == (
        "anthropic_messages",
        "google_generate",
        "openai_chat",
        "openai_responses",
    )


def test_the_callers_own_format_wraps_the_one_error() -> None:
    """Where a spec names the kind, the error says which field, and still names the known."""
    with pytest.raises(
        UnknownBuilder, match=r"^builder.name: unknown builder 'magic' \(known: "
    ) as b:
        check_builder(BuilderSpec(name="magic"))
    assert b.value.kind == "magic" and b.value.known == BUILDERS.kinds()
    with pytest.raises(UnknownPoolKind, match=r"^pool x: unknown pool kind 'tgi' \(known: ") as p:
        parse_pools('{"x": {"models": ["m"], "upstreams": ["u"], "kind": "tgi"}}')
    assert isinstance(p.value, PoolError) and p.value.known == POOL_KINDS.kinds()

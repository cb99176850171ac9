"""A multi-step session's steps, each its own run: `joined_runs` lets `prefix_merging` chain
from one step's calls to the next's where the conversation is append-only (a harness that
resumes its session), and a harness that starts afresh at each step still gets a new chain."""

from __future__ import annotations

from pathlib import Path

import pytest

from polar.builders import get_builder
from polar.builders.base import joined_runs
from polar.records import BreakKind
from tests.support.builders import (
    SYSTEM,
    TinyBackend,
    check_invariants,
    context,
    tokenizer_dir_fixture,  # noqa: F401  (the tokenizer_dir fixture)
)


@pytest.fixture
def backend(tokenizer_dir: Path) -> TinyBackend:
    from polar.tokenization import load_tokenizer

    return TinyBackend(load_tokenizer(str(tokenizer_dir)))


def _two_steps(backend: TinyBackend, resume: bool) -> None:
    """Step one (run attempt 1) and step two (run attempt 4: its own run)."""
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say alpha."}]
    answer = backend.call(first, "alpha", attempt=1)
    second = [*first, answer] if resume else [{"role": "system", "content": SYSTEM}]
    backend.call([*second, {"role": "user", "content": "Say beta."}], "beta", attempt=4)


@pytest.mark.parametrize(("resume", "traces"), [(True, 1), (False, 2)])
def test_steps_chain_where_the_conversation_is_append_only(
    backend: TinyBackend, resume: bool, traces: int
) -> None:
    _two_steps(backend, resume)
    build = get_builder("prefix_merging")
    apart = build(backend.records, context("prefix_merging"))
    assert len(apart.traces) == 2  # runs are never chained unless joined
    records = joined_runs(backend.records, [1, 4])
    out = build(records, context("prefix_merging"))
    assert len(out.traces) == traces, out.breaks
    per_request = get_builder("per_request")(records, context("per_request"))
    check_invariants(records, per_request, out)
    if not resume:
        assert out.breaks == {BreakKind.NEW_CONTEXT.value: 1}


def test_only_the_named_runs_are_joined(backend: TinyBackend) -> None:
    _two_steps(backend, True)
    assert [r.attempt for r in joined_runs(backend.records, [])] == [1, 4]
    assert [r.attempt for r in joined_runs(backend.records, [4, 1])] == [1, 1]
    assert [r.attempt for r in joined_runs(backend.records, [4, 7])] == [1, 4]

"""Calls of several choices (`n > 1`): every choice its own trace, every sampled token once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from polar.builders import BuildOutput, get_builder
from polar.records import BreakKind, CompletionRecord, SampledChoice, Trace
from tests.support.builders import (
    SYSTEM,
    TinyBackend,
    context,
    record,
    sampled,
    tokenizer_dir_fixture,  # noqa: F401  (the tokenizer_dir fixture)
)


@pytest.fixture
def backend(tokenizer_dir: Path) -> TinyBackend:
    from polar.tokenization import load_tokenizer

    return TinyBackend(load_tokenizer(str(tokenizer_dir)))


def several(backend: TinyBackend, messages: list[dict[str, Any]], texts: list[str]) -> None:
    """One call answered with one choice per text (as vLLM answers `n = len(texts)`)."""
    singles = []
    for text in texts:
        backend.call(messages, text)
        singles.append(backend.records.pop())
    first = singles[0]
    choices = [
        SampledChoice(
            index=i,
            response_token_ids=r.response_token_ids,
            response_logprobs=[lp - 0.01 * i for lp in r.response_logprobs or []],
            finish_reason=r.finish_reason,
        )
        for i, r in enumerate(singles)
    ]
    body = dict(first.response or {})
    body["choices"] = [
        (r.response or {})["choices"][0] | {"index": i} for i, r in enumerate(singles)
    ]
    backend.records.append(
        first.model_copy(
            update={
                "response": body,
                "choices": choices,
                "response_logprobs": choices[0].response_logprobs,
            }
        )
    )


def choices_of(trace: Trace, by_id: dict[str, CompletionRecord]) -> list[tuple[str, int]]:
    """(record id, choice) of each member, found by its sampled ids and logprobs in order."""
    rest = sampled(trace)
    found = []
    for rid in trace.provenance.record_ids:
        for choice in by_id[rid].sampled():
            span = list(
                zip(choice.response_token_ids or [], choice.response_logprobs or [], strict=True)
            )
            if rest[: len(span)] == span:
                found.append((rid, choice.index))
                rest = rest[len(span) :]
                break
        else:
            raise AssertionError(f"{trace.trace_id}: no choice of {rid} is sampled here")
    assert rest == [], f"{trace.trace_id}: sampled tokens of no member"
    return found


def assert_each_choice_once(records: list[CompletionRecord], out: BuildOutput) -> None:
    by_id = {r.record_id: r for r in records}
    seen = Counter(c for t in out.traces for c in choices_of(t, by_id))
    assert seen == Counter((r.record_id, c.index) for r in records for c in r.sampled())
    for trace in out.traces:  # each member's prompt is a prefix of its trace
        full = trace.prompt_ids + trace.response_ids
        for rid in trace.provenance.record_ids:
            prompt = by_id[rid].prompt_token_ids or []
            assert full[: len(prompt)] == prompt


def test_every_choice_is_its_own_trace_and_the_chain_follows_the_one_used(
    backend: TinyBackend,
) -> None:
    question = [SYSTEM, {"role": "user", "content": "Name a fruit."}]
    backend.call(question, "Let me think.")
    history = question + [
        {"role": "assistant", "content": "Let me think."},
        {"role": "user", "content": "Go on."},
    ]
    several(backend, history, ["Apple.", "Banana.", "Cherry."])
    carried = [{"role": "assistant", "content": "Banana."}, {"role": "user", "content": "Why?"}]
    backend.call(history + carried, "It is yellow.")
    records = backend.records
    assert [len(r.sampled()) for r in records] == [1, 3, 1]

    per_request = get_builder("per_request")(records, context("per_request"))
    merged = get_builder("prefix_merging")(records, context("prefix_merging"))
    for out in (per_request, merged):
        assert_each_choice_once(records, out)
        assert out.unusable == []

    n = records[1].record_id
    assert [t.trace_id for t in per_request.traces] == [
        "s1/r0000",
        f"s1/{n}",
        f"s1/{n}-choice1",
        f"s1/{n}-choice2",
        "s1/r0002",
    ]
    assert {t.prompt_ids == records[1].prompt_token_ids for t in per_request.traces[1:4]} == {True}
    assert [t.response_message["content"] for t in per_request.traces[1:4]] == [  # type: ignore[index]
        "Apple.",
        "Banana.",
        "Cherry.",
    ]
    by_id = {r.record_id: r for r in records}
    chains = {t.trace_id: choices_of(t, by_id) for t in merged.traces}
    assert chains == {
        "s1/chain-r0000": [("r0000", 0), (n, 1), ("r0002", 0)],  # Banana was carried on
        f"s1/chain-{n}": [(n, 0)],
        f"s1/chain-{n}-choice2": [(n, 2)],
    }
    for trace in merged.traces[1:]:
        started = trace.provenance.reconstruction.started_by  # type: ignore[union-attr]
        assert started is not None and started.kind is BreakKind.BRANCH
    assert merged.breaks == {"branch": 2}


def test_old_single_choice_records_still_build() -> None:
    """A stored record without `choices` is one choice: the top-level fields."""
    old = record(0, [1, 2, 3], [4, 5, 6]).model_dump()
    old.pop("choices")
    loaded = CompletionRecord.model_validate(old)
    assert [c.response_token_ids for c in loaded.sampled()] == [[4, 5, 6]]
    out = get_builder("per_request")([loaded], context("per_request"))
    assert [t.response_ids for t in out.traces] == [[4, 5, 6]]
    assert [t.trace_id for t in out.traces] == ["s1/r0000"]

"""Property tests of the builders over generated sessions (random token chains).

A generated session interleaves several conversations: new contexts (some
sharing a system-prompt prefix with another, like sub-agents and compactions),
clean continuations, parallel calls from the same context, continuations
whose prompt re-renders the previous sampled turn (drift, the same turn in
the messages) or changes earlier history, turns cut by length, and a second
harness attempt. Tokens come from a small vocabulary so that accidental
prefix matches happen. With `max_choices > 1` a call may answer with several
choices (`n > 1`), and later calls carry on from any one of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polar.builders import get_builder
from polar.records import BreakKind, CompletionRecord, SampledChoice
from tests.support.builders import check_invariants, context, record
from tests.unit.polar.builders.test_builders_choices import assert_each_choice_once

EOS = 2
GLUE = 1
TOKENS = st.integers(min_value=10, max_value=24)


@dataclass
class Turn:
    prompt: list[int]
    response: list[int]
    messages: list[dict[str, Any]]
    answer: dict[str, Any]
    attempt: int


def _body(response: list[int]) -> list[int]:
    return response[:-1] if response and response[-1] == EOS else response


def _sampled(draw: st.DrawFn, nonempty: bool) -> tuple[list[int], str]:
    """One choice's sampled ids (ending in EOS when it stopped) and finish reason."""
    response = draw(st.lists(TOKENS, min_size=int(nonempty), max_size=6))
    finish = draw(st.sampled_from(["stop", "stop", "length"]))
    if finish == "stop":
        response.append(EOS)
    return response, finish


def _with_choices(
    rec: CompletionRecord,
    sampled: list[tuple[list[int], str]],
    answers: list[dict[str, Any]],
    logprobs: Iterator[int],
) -> CompletionRecord:
    """`rec` answered with one choice per `sampled` (as the gateway records `n > 1`), each
    sampled token with a logprob no other token of the session has."""
    choices = [
        SampledChoice(
            index=i,
            response_token_ids=response,
            response_logprobs=[-next(logprobs) / 1000 for _ in response],
            finish_reason=finish,
        )
        for i, (response, finish) in enumerate(sampled)
    ]
    body = {
        "choices": [
            {"index": i, "message": answer, "finish_reason": finish}
            for i, (answer, (_, finish)) in enumerate(zip(answers, sampled, strict=True))
        ]
    }
    return rec.model_copy(
        update={
            "response": body,
            "response_logprobs": choices[0].response_logprobs,
            "choices": choices if len(choices) > 1 else [],
        }
    )


@st.composite
def sessions(draw: st.DrawFn, max_choices: int = 1) -> list[CompletionRecord]:
    turns: list[Turn] = []
    records: list[CompletionRecord] = []
    attempt = 1
    logprobs = itertools.count(1)
    for n in range(draw(st.integers(min_value=1, max_value=14))):
        if turns and n > 4 and attempt == 1 and draw(st.integers(0, 19)) == 0:
            attempt = 2  # the harness restarted
        mine = [t for t in turns if t.attempt == attempt]
        action = draw(st.sampled_from(["new", "continue", "continue", "branch", "drift", "edit"]))
        if not mine:
            action = "new"
        base = draw(st.sampled_from(mine)) if mine else None
        user = {"role": "user", "content": f"u{n}"}
        if action == "new":
            shared: list[int] = []
            # a sub-agent or compaction keeps a system prefix
            if len(turns) > 0 and draw(st.booleans()):
                other = draw(st.sampled_from(turns)).prompt
                shared = other[: draw(st.integers(0, len(other)))]
            prompt = shared + draw(st.lists(TOKENS, min_size=1, max_size=6))
            messages = [user]
        elif action == "branch":  # a parallel call or retry from the same context
            assert base is not None
            prompt, messages = list(base.prompt), list(base.messages)
        else:
            assert base is not None
            body = _body(base.response)
            if action == "drift":  # the template re-renders the sampled turn
                body = draw(st.lists(TOKENS, max_size=6))
            glue = [EOS, GLUE] + draw(st.lists(TOKENS, max_size=4))
            if action == "continue" and base.response and base.response[-1] == EOS:
                glue = glue[1:]  # the sampled end token is already there
            prompt = list(base.prompt) + (base.response if action == "continue" else body) + glue
            if action == "edit" and len(prompt) > 1:  # earlier history changed
                i = draw(st.integers(0, len(prompt) - 2))
                prompt[i] = 99
            messages = [*base.messages, base.answer, user]
        k = draw(st.integers(1, max_choices)) if max_choices > 1 else 1
        # several choices sample at least one token each, so that each is told apart
        sampled = [_sampled(draw, nonempty=k > 1) for _ in range(k)]
        answers = [
            {"role": "assistant", "content": f"a{n}.{i}" if i else f"a{n}"} for i in range(k)
        ]
        rec = record(
            n,
            prompt,
            sampled[0][0],
            finish=sampled[0][1],
            messages=messages,
            answer=answers[0],
            attempt=attempt,
        )
        records.append(_with_choices(rec, sampled, answers, logprobs) if max_choices > 1 else rec)
        for (response, _), answer in zip(sampled, answers, strict=True):
            turns.append(Turn(prompt, response, messages, answer, attempt))
    return records


@st.composite
def sessions_with_unusable(draw: st.DrawFn) -> list[CompletionRecord]:
    records = draw(sessions())
    out = []
    for r in records:
        kind = draw(st.sampled_from(["ok", "ok", "ok", "ok", "failed", "no_prompt"]))
        if kind == "failed":
            r = r.model_copy(update={"error": "boom", "response_token_ids": None})
        elif kind == "no_prompt":
            r = r.model_copy(update={"prompt_token_ids": None, "has_token_ids": False})
        out.append(r)
    return out


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(sessions_with_unusable())
def test_prefix_merging_is_token_faithful(records: list[CompletionRecord]) -> None:
    per_request = get_builder("per_request")(records, context("per_request"))
    merged = get_builder("prefix_merging")(records, context("prefix_merging", eos_token_ids=[EOS]))
    check_invariants(records, per_request, merged, prompts_are_prefixes=True)
    stats = [t.provenance.reconstruction for t in merged.traces]
    assert sum(merged.breaks.values()) == sum(1 for s in stats if s and s.started_by)


@SETTINGS
@given(sessions_with_unusable())
def test_repair_is_token_faithful(records: list[CompletionRecord]) -> None:
    per_request = get_builder("per_request")(records, context("per_request"))
    repaired = get_builder("prefix_merging")(
        records, context("prefix_merging", eos_token_ids=[EOS], repair="response_span")
    )
    check_invariants(records, per_request, repaired, prompts_are_prefixes=False)
    plain = get_builder("prefix_merging")(records, context("prefix_merging", eos_token_ids=[EOS]))
    assert len(repaired.traces) <= len(plain.traces)
    for trace in repaired.traces:
        stats = trace.provenance.reconstruction
        assert stats is not None
        for fix in stats.repairs:
            assert fix.repaired and fix.kind not in (
                BreakKind.BRANCH,
                BreakKind.NEW_CONTEXT,
                BreakKind.HISTORY_CHANGED,
            )


@SETTINGS
@given(sessions())
def test_each_trace_is_a_clean_chain_and_chains_never_span_attempts(
    records: list[CompletionRecord],
) -> None:
    merged = get_builder("prefix_merging")(records, context("prefix_merging"))
    by_id = {r.record_id: r for r in records}
    seen: set[str] = set()
    for trace in merged.traces:
        members = [by_id[rid] for rid in trace.provenance.record_ids]
        assert len({r.attempt for r in members}) == 1
        assert not seen & set(trace.provenance.record_ids)
        seen |= set(trace.provenance.record_ids)
        # consecutive members: the next prompt extends the previous prompt + sampled response
        for before, after in zip(members, members[1:], strict=False):
            head = (before.prompt_token_ids or []) + (before.response_token_ids or [])
            assert (after.prompt_token_ids or [])[: len(head)] == head
    assert seen == set(by_id)


@SETTINGS
@given(sessions(max_choices=4))
def test_every_sampled_token_of_every_choice_is_in_exactly_one_trace(
    records: list[CompletionRecord],
) -> None:
    """Calls of 1-4 choices: each choice is in exactly one trace of each builder, its
    sampled ids in order with their logprobs, and nothing else is trained."""
    choices = [(r.record_id, c) for r in records for c in r.sampled()]
    sampled_tokens = sum(len(c.response_token_ids or []) for _, c in choices)
    per_request = get_builder("per_request")(records, context("per_request"))
    merged = get_builder("prefix_merging")(records, context("prefix_merging", eos_token_ids=[EOS]))
    assert len(per_request.traces) == len(choices)
    for out in (per_request, merged):
        assert out.unusable == []
        assert_each_choice_once(records, out)
        assert sum(sum(t.loss_mask) for t in out.traces) == sampled_tokens
        for trace in out.traces:
            n = len(trace.response_ids)
            assert len(trace.loss_mask) == n and len(trace.response_logprobs) == n
            rows = zip(trace.loss_mask, trace.response_logprobs, strict=True)
            assert all(lp == 0.0 for m, lp in rows if m == 0)

"""Builders on realistic sessions: the tiny tokenizer, its Qwen3-style template, tools, thinking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from polar.builders import BuildOutput, get_builder
from polar.records import BreakKind, CompletionRecord, Trace
from tests.support.builders import (
    SYSTEM,
    TOOLS,
    TinyBackend,
    assistant_text,
    check_invariants,
    context,
    tokenizer_dir_fixture,  # noqa: F401  (the tokenizer_dir fixture)
    tool_result,
)


@pytest.fixture(scope="module")
def tok(tokenizer_dir: Path) -> Any:
    from polar.tokenization import load_tokenizer

    return load_tokenizer(str(tokenizer_dir))


@pytest.fixture
def backend(tok: Any) -> TinyBackend:
    return TinyBackend(tok)


def build(
    records: list[CompletionRecord], tokenizer_dir: Path, **config: Any
) -> tuple[BuildOutput, BuildOutput]:
    """per_request and prefix_merging of `records`, with the invariants checked."""
    config = {"tokenizer": str(tokenizer_dir), **config}
    common = {k: v for k, v in config.items() if k != "repair"}
    per_request = get_builder("per_request")(records, context("per_request", **common))
    merged = get_builder("prefix_merging")(records, context("prefix_merging", **config))
    check_invariants(
        records, per_request, merged, prompts_are_prefixes=config.get("repair") != "response_span"
    )
    return per_request, merged


def members(trace: Trace) -> list[str]:
    return [rid[1:] for rid in trace.provenance.record_ids]  # "r0003" -> "0003"


def tool_loop(backend: TinyBackend, messages: list[dict[str, Any]], steps: int) -> None:
    """`steps` calls of one agent: tool calls with reasoning, then a final answer."""
    for i in range(steps):
        last = i == steps - 1
        calls = [] if last else [("bash", {"command": f"cat file{i}.py"})]
        text = assistant_text(
            "All tests pass now." if last else "",
            reasoning=f"Step {i}: I should look at file{i}.",
            calls=calls,
        )
        answer = backend.call(messages, text, tools=TOOLS)
        messages.append(answer)
        if not last:
            messages.append(tool_result(answer, f"def f{i}():\n    return {i}\n"))


def test_multi_turn_tool_use_merges_into_one_trace(
    backend: TinyBackend, tokenizer_dir: Path, tok: Any
) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Fix the failing test."}]
    tool_loop(backend, messages, steps=4)
    per_request, merged = build(backend.records, tokenizer_dir)
    assert len(per_request.traces) == 4
    (trace,) = merged.traces
    stats = trace.provenance.reconstruction
    assert stats is not None
    assert trace.provenance.record_ids == [r.record_id for r in backend.records]
    assert trace.provenance.completion_seqs == [r.seq for r in backend.records]
    assert (stats.chains, stats.members, stats.started_by, stats.session_breaks) == (1, 4, None, {})
    assert stats.sampled_eos == 4 and stats.template_eos == 0
    assert trace.provenance.model == "policy" and trace.provenance.harness == "command"
    # the sampled end token is trained on; the newline the template writes after it is not
    eos, newline = tok.eos_token_id, tok.encode("\n", add_special_tokens=False)
    full, mask = trace.response_ids, trace.loss_mask
    ends = [i for i, t in enumerate(full) if t == eos and mask[i] == 1]
    assert len(ends) == 4
    for i in ends[:-1]:
        assert full[i + 1 : i + 1 + len(newline)] == newline and mask[i + 1] == 0
    assert trace.prompt_messages == backend.records[0].normalized_request["messages"]
    assert trace.tools == TOOLS


def test_compaction_starts_a_new_chain(backend: TinyBackend, tokenizer_dir: Path) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Fix the failing test."}]
    tool_loop(backend, messages, steps=2)
    summary = "Summary so far: file0.py was read; the bug is in f0."
    compacted = [SYSTEM, {"role": "user", "content": summary}]
    tool_loop(backend, compacted, steps=2)
    _, merged = build(backend.records, tokenizer_dir)
    assert [members(t) for t in merged.traces] == [["0000", "0001"], ["0002", "0003"]]
    started = merged.traces[1].provenance.reconstruction.started_by  # type: ignore[union-attr]
    assert started is not None and started.kind == BreakKind.NEW_CONTEXT
    assert started.chain == merged.traces[0].trace_id and started.record_id == "r0002"
    assert merged.breaks == {"new_context": 1}


def test_a_context_overflow_then_compaction_splits_the_chain_there(
    backend: TinyBackend, tokenizer_dir: Path
) -> None:
    """The gateway records an overflow (400 `context_length_exceeded`) as a failed call; the
    harness compacts and goes on: the call is in no trace, and the chain breaks where the
    compacted context starts (`new_context`), as the harness CLIs do (issue 25)."""
    messages = [SYSTEM, {"role": "user", "content": "Fix the failing test."}]
    tool_loop(backend, messages, steps=2)
    n = len(backend.records)
    overflow = backend.records[-1].model_copy(
        update={
            "record_id": f"r{n:04d}",
            "seq": backend.records[-1].seq + 1,
            "normalized_request": {**backend.records[-1].normalized_request, "messages": messages},
            "response": None,
            "status_code": 400,
            "error": "context_length_exceeded: This model's maximum context length is 64 tokens",
            "prompt_token_ids": None,
            "response_token_ids": None,
            "response_logprobs": None,
            "has_token_ids": False,
            "choices": [],
            "finish_reason": None,
        }
    )
    backend.records.append(overflow)
    summary = "Summary so far: file0.py was read; the bug is in f0."
    tool_loop(backend, [SYSTEM, {"role": "user", "content": summary}], steps=2)
    per_request, merged = build(backend.records, tokenizer_dir)
    assert len(per_request.traces) == 4  # the overflow sampled nothing
    assert [members(t) for t in merged.traces] == [["0000", "0001"], ["0003", "0004"]]
    started = merged.traces[1].provenance.reconstruction.started_by  # type: ignore[union-attr]
    assert started is not None and started.kind == BreakKind.NEW_CONTEXT
    assert started.record_id == "r0003"


def test_sub_agent_and_parallel_calls_make_separate_chains(
    backend: TinyBackend, tokenizer_dir: Path
) -> None:
    main = [SYSTEM, {"role": "user", "content": "Fix the failing test."}]
    answer = backend.call(
        main, assistant_text("", "Delegate.", [("bash", {"command": "spawn"})]), tools=TOOLS
    )  # 0
    sub = [{"role": "system", "content": "You are a sub-agent."}, {"role": "user", "content": "Go"}]
    sub_answer = backend.call(sub, assistant_text("Looking."))  # 1
    # two parallel calls of the main agent from the same context
    main += [answer, tool_result(answer, "sub-agent started")]
    first = backend.call(main, assistant_text("Option A.", "Try A."), tools=TOOLS)  # 2
    second = backend.call(main, assistant_text("Option B.", "Try B."), tools=TOOLS)  # 3
    sub += [sub_answer, {"role": "user", "content": "Continue"}]
    backend.call(sub, assistant_text("Found it."))  # 4
    go_b = [*main, second, {"role": "user", "content": "Go on with B"}]
    backend.call(go_b, "B done.", tools=TOOLS)  # 5
    go_a = [*main, first, {"role": "user", "content": "Go on with A"}]
    backend.call(go_a, "A done.", tools=TOOLS)  # 6
    _, merged = build(backend.records, tokenizer_dir)
    chains = {tuple(members(t)) for t in merged.traces}
    # a new user turn drops the reasoning of 2 and 3 (Qwen3 rule): 5 and 6 split off too
    assert ("0001", "0004") in chains
    assert ("0000", "0002") in chains and ("0003",) in chains
    kinds = {
        t.provenance.record_ids[0]: t.provenance.reconstruction.started_by.kind  # type: ignore[union-attr]
        for t in merged.traces[1:]
    }
    assert kinds["r0001"] == BreakKind.NEW_CONTEXT
    assert kinds["r0003"] == BreakKind.BRANCH
    assert kinds["r0005"] == kinds["r0006"] == BreakKind.THINK_DROPPED
    # repaired, each continuation joins the chain of the turn it continues
    _, repaired = build(backend.records, tokenizer_dir, repair="response_span")
    chains = {tuple(members(t)) for t in repaired.traces}
    assert chains == {("0000", "0002", "0006"), ("0001", "0004"), ("0003", "0005")}


def test_parallel_calls_without_reasoning_continue_their_own_chains(
    backend: TinyBackend, tokenizer_dir: Path
) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Pick one."}]
    a = backend.call(messages, "A")
    b = backend.call(messages, "B")
    backend.call([*messages, b, {"role": "user", "content": "Why?"}], "Because.")
    backend.call([*messages, a, {"role": "user", "content": "Why?"}], "Because A.")
    _, merged = build(backend.records, tokenizer_dir)
    assert [members(t) for t in merged.traces] == [["0000", "0003"], ["0001", "0002"]]
    assert merged.breaks == {"branch": 1}


def test_truncated_turn_ends_with_a_template_end_token(
    backend: TinyBackend, tokenizer_dir: Path, tok: Any
) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Explain the bug."}]
    answer = backend.call(messages, "The bug is that the function returns", finish="length")
    backend.call([*messages, answer, {"role": "user", "content": "Continue."}], "None.")
    _, merged = build(backend.records, tokenizer_dir)
    (trace,) = merged.traces
    stats = trace.provenance.reconstruction
    assert stats is not None and (stats.sampled_eos, stats.template_eos) == (1, 1)
    cut = len(backend.records[0].response_token_ids or [])
    assert trace.response_ids[cut] == tok.eos_token_id and trace.loss_mask[cut] == 0


def test_turn_truncated_inside_reasoning_gets_the_closing_tags_masked(
    backend: TinyBackend, tokenizer_dir: Path, tok: Any
) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Fix the failing test."}]
    cut = backend.call(messages, "<think>\nFirst I need to look at", tools=TOOLS, finish="length")
    assert cut["content"] is None and cut["reasoning_content"]
    # the template closes the reasoning block the model never closed: mask 0, not trained
    backend.call([*messages, cut], "Done.", tools=TOOLS)
    _, merged = build(backend.records, tokenizer_dir)
    (trace,) = merged.traces
    stats = trace.provenance.reconstruction
    assert stats is not None and (stats.sampled_eos, stats.template_eos) == (1, 1)
    n = len(backend.records[0].response_token_ids or [])
    closing = tok.encode("\n</think>\n\n", add_special_tokens=False) + [tok.eos_token_id]
    assert trace.response_ids[n : n + len(closing)] == closing
    assert trace.loss_mask[n : n + len(closing)] == [0] * len(closing)


def test_truncated_turn_retokenised_splits_or_is_repaired(
    backend: TinyBackend, tokenizer_dir: Path
) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Explain the bug."}]
    # cut after a space; the harness's parser strips it, so the prompt re-renders the turn
    cut = backend.call(messages, "The bug is that the function returns ", finish="length")
    backend.call([*messages, cut, {"role": "user", "content": "Continue."}], "None.")
    _, merged = build(backend.records, tokenizer_dir)
    assert len(merged.traces) == 2 and merged.breaks == {"truncated_turn": 1}
    _, repaired = build(backend.records, tokenizer_dir, repair="response_span")
    (trace,) = repaired.traces
    stats = trace.provenance.reconstruction
    assert stats is not None and [r.kind for r in stats.repairs] == [BreakKind.TRUNCATED_TURN]
    assert stats.template_eos == 1 and stats.session_repairs == {"truncated_turn": 1}


def test_rerendered_history_splits_by_default_and_is_repaired_when_asked(
    backend: TinyBackend, tokenizer_dir: Path
) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Fix the failing test."}]
    tool_loop(backend, messages, steps=3)
    messages.append({"role": "user", "content": "Now add a regression test."})
    tool_loop(backend, messages, steps=2)  # the new user turn drops every earlier <think>
    _, merged = build(backend.records, tokenizer_dir)
    assert [members(t) for t in merged.traces] == [["0000", "0001", "0002"], ["0003", "0004"]]
    started = merged.traces[1].provenance.reconstruction.started_by  # type: ignore[union-attr]
    assert started is not None and started.kind == BreakKind.THINK_DROPPED
    assert not started.repaired and "r0000" in started.detail

    _, repaired = build(backend.records, tokenizer_dir, repair="response_span")
    (trace,) = repaired.traces
    stats = trace.provenance.reconstruction
    assert stats is not None
    assert [r.kind for r in stats.repairs] == [BreakKind.THINK_DROPPED] * 3
    assert all(r.repaired and r.record_id == "r0003" for r in stats.repairs)
    # the members before the repair are still exact prefixes; the sampled <think> tokens stay
    first = backend.records[:3]
    from tests.support.builders import check_prompts_are_prefixes

    check_prompts_are_prefixes(trace, first)


def test_reserialised_tool_call_arguments(backend: TinyBackend, tokenizer_dir: Path) -> None:
    messages = [SYSTEM, {"role": "user", "content": "List the files."}]
    # the model writes compact JSON; the template re-dumps it with spaces
    compact = '<tool_call>\n{"name": "bash", "arguments": {"command":"ls"}}\n</tool_call>'
    answer = backend.call(messages, compact, tools=TOOLS)
    messages += [answer, tool_result(answer, "app.py")]
    backend.call(messages, "There is one file.", tools=TOOLS)
    _, merged = build(backend.records, tokenizer_dir)
    assert merged.breaks == {"tool_call_rerendered": 1}
    _, repaired = build(backend.records, tokenizer_dir, repair="response_span")
    (trace,) = repaired.traces
    assert [r.kind for r in trace.provenance.reconstruction.repairs] == [  # type: ignore[union-attr]
        BreakKind.TOOL_CALL_RERENDERED
    ]


def test_repair_needs_the_same_turn_and_an_end_token(
    backend: TinyBackend, tokenizer_dir: Path
) -> None:
    messages = [SYSTEM, {"role": "user", "content": "Fix the failing test."}]
    tool_loop(backend, messages, steps=1)
    edited = dict(messages[-1], content="Something else entirely.")
    backend.call([*messages[:-1], edited, {"role": "user", "content": "Ok?"}], "Yes.", tools=TOOLS)
    backend.call([*messages, {"role": "user", "content": "More."}], "More.", tools=TOOLS)
    # another turn where the sampled one was: a branch, never repaired
    records = backend.records[:2]
    _, repaired = build(records, tokenizer_dir, repair="response_span")
    assert repaired.breaks == {"branch": 1}
    # the same turn without its <think>: repairable, but not without end-of-turn ids
    records = [backend.records[0], backend.records[2]]
    _, repaired = build(records, tokenizer_dir, repair="response_span")
    assert len(repaired.traces) == 1
    out = get_builder("prefix_merging")(records, context("prefix_merging", repair="response_span"))
    started = out.traces[1].provenance.reconstruction.started_by  # type: ignore[union-attr]
    assert started is not None and started.kind == BreakKind.THINK_DROPPED
    assert "no end-of-turn ids" in started.detail

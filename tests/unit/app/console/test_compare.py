"""The compare page's data: where two conversations diverge, patch sizes, the selection."""

from __future__ import annotations

from typing import Any

import pytest

from app.console.compare import (
    MAX_COMPARED,
    ClosedConversations,
    CompareError,
    Divergence,
    patch_sizes,
    selected,
)
from app.console.compare import conversation as conversation_of
from app.console.compare import divergence as conversations_divergence
from app.console.views import SessionRow


def divergence(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> Divergence:
    """Where the conversations of two sessions' records part."""
    return conversations_divergence(conversation_of(mine), conversation_of(theirs))


def record(messages: list[str], answer: str, **kw: Any) -> dict[str, Any]:
    return {
        "request": {"messages": [{"role": "user", "content": m} for m in messages]},
        "normalized_request": {
            "messages": [{"role": "user", "content": m} for m in messages],
            "max_tokens": kw.pop("max_tokens", 100),
        },
        "response": {"choices": [{"message": {"role": "assistant", "content": answer}}]},
        **kw,
    }


def conversation(*answers: str) -> list[dict[str, Any]]:
    calls, said = [], ["task"]
    for answer in answers:
        calls.append(record(list(said), answer))
        said += [answer, "go on"]
    return calls


def test_the_same_conversation_never_diverges() -> None:
    same = divergence(conversation("a", "b"), conversation("a", "b"))
    assert (same.call, same.part) == (None, "")


def test_a_different_answer_diverges_at_its_response_then_the_next_request() -> None:
    found = divergence(conversation("a", "b", "c"), conversation("a", "x", "c"))
    assert (found.call, found.part) == (1, "response")
    assert found.mine is not None and found.theirs is not None
    assert (found.mine.response, found.theirs.response) == ("b", "x")
    assert found.mine.request == "user: go on"


def test_a_different_request_diverges_there() -> None:
    mine, theirs = conversation("a", "b"), conversation("a", "b")
    mine[1]["normalized_request"]["messages"][-1]["content"] = "other tool output"
    found = divergence(mine, theirs)
    assert (found.call, found.part) == (1, "request")


def test_sampling_knobs_are_not_the_conversation() -> None:
    mine = [record(["task"], "a", max_tokens=10)]
    assert divergence(mine, [record(["task"], "a", max_tokens=99)]).call is None


def test_tool_calls_are_part_of_the_response() -> None:
    mine, theirs = conversation("a"), conversation("a")
    call = {"function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
    mine[0]["response"]["choices"][0]["message"]["tool_calls"] = [call]
    found = divergence(mine, theirs)
    assert (found.call, found.part) == (0, "response")
    assert found.mine is not None and 'bash({"cmd": "ls"})' in found.mine.response


def test_a_long_answer_differs_past_what_is_shown_and_tool_call_ids_do_not_count() -> None:
    long = "x" * 10_000
    assert divergence(conversation(long + "a"), conversation(long + "b")).call == 0
    mine, theirs = conversation("a"), conversation("a")
    for calls, call_id in ((mine, "call_1"), (theirs, "call_2")):
        call = {"id": call_id, "function": {"name": "ls", "arguments": "{}"}}
        calls[0]["response"]["choices"][0]["message"]["tool_calls"] = [call]
    assert divergence(mine, theirs).call is None


def test_one_that_made_more_calls_diverges_where_the_other_stopped() -> None:
    found = divergence(conversation("a", "b"), conversation("a"))
    assert (found.call, found.part) == (1, "length")
    assert found.mine is not None and found.theirs is None


def test_a_conversation_keeps_the_token_lengths() -> None:
    calls = conversation("a", "b")
    calls[0]["response_token_ids"], calls[1]["response_token_ids"] = [1, 2], [3, 4, 5]
    calls[1]["prompt_token_ids"] = list(range(10))
    talk = conversation_of(calls)
    assert (talk.context_tokens, talk.sampled_tokens, len(talk.digests)) == (13, 5, 2)


def test_patch_sizes_count_files_and_lines() -> None:
    patch = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-old\n+new\n+more\n same\n"
    assert patch_sizes({"p": patch, "q": "+++ b/y\n+z\n"}) == (2, 3, 1)


def rows(n: int) -> list[SessionRow]:
    return [SessionRow(session_id=f"s{i}", index=i, status="completed") for i in range(n)]


def test_the_selection_is_of_the_task_s_sessions() -> None:
    assert [r.session_id for r in selected(rows(3), [])] == ["s0", "s1", "s2"]
    assert [r.session_id for r in selected(rows(3), ["s2", "s0", "s2"])] == ["s2", "s0"]
    with pytest.raises(CompareError, match="not a session of this task"):
        selected(rows(3), ["s0", "other"])
    with pytest.raises(CompareError, match="select 2"):
        selected(rows(3), ["s1"])
    with pytest.raises(CompareError, match="select at most"):
        selected(rows(MAX_COMPARED + 1), [])


def test_the_cache_keeps_the_newest_finished_sessions() -> None:
    cache = ClosedConversations(size=2)
    parts = (conversation_of(conversation("a")), {})
    for sid in ("s0", "s1"):
        cache.put(sid, parts)
    assert cache.get("s0") is parts  # s0 used: s1 is now the oldest
    cache.put("s2", parts)
    assert cache.get("s1") is None and cache.get("s0") is parts and cache.get("s2") is parts

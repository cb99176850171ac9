"""One entry per model call: what a stored record's dict becomes on the session page."""

from __future__ import annotations

from typing import Any

from app.console.calls import (
    call_entry,
    elided,
    pretty,
    replica_of,
    training_status,
    unseen_reasons,
)


def record(**kw: Any) -> dict[str, Any]:
    request = {"model": "policy", "messages": [{"role": "user", "content": "list the files"}]}
    base: dict[str, Any] = {
        "session_id": "s1",
        "task_id": "t1",
        "seq": 5,
        "record_id": "r5",
        "provider": "anthropic_messages",
        "request": request,
        "normalized_request": {**request, "logprobs": True, "max_tokens": 64},
        "response": {
            "choices": [
                {
                    "message": {
                        "content": "Listing them.",
                        "reasoning_content": "they asked for files",
                        "tool_calls": [
                            {"function": {"name": "shell", "arguments": '{"cmd": "ls"}'}}
                        ],
                    }
                }
            ]
        },
        "prompt_token_ids": [1, 2, 3],
        "response_token_ids": [4, 5],
        "finish_reason": "tool_calls",
        "started_at": 10.0,
        "finished_at": 10.75,
    }
    return base | kw


def test_an_entry_has_the_answer_the_newest_message_and_what_normalisation_changed() -> None:
    entry = call_entry(2, record(), {"r5"})
    assert entry.n == 2 and entry.provider == "anthropic_messages"
    assert entry.latency_s == 0.75 and entry.finish_reason == "tool_calls"
    assert (entry.prompt_tokens, entry.response_tokens) == (3, 2)
    assert entry.response_text == "[reasoning] they asked for files\nListing them."
    assert entry.tool_calls == ['shell({"cmd": "ls"})']
    assert entry.last_message == "user: list the files"
    assert entry.sent_last == "user: list the files"
    assert entry.normalized_changes == ["+logprobs", "+max_tokens"]
    assert entry.training == "trained"


def test_training_status_says_why_a_sample_is_not_trained() -> None:
    assert training_status(record(), set()) == "unseen"
    assert training_status(record(client_disconnected=True), {"r5"}) == "client disconnected"
    assert training_status(record(untrainable="logit_bias"), {"r5"}) == "untrainable: logit_bias"
    assert training_status(record(status_code=400, error="off-policy"), set()) == "refused"
    assert training_status(record(status_code=502, error="upstream"), set()) == "failed"
    assert training_status(record(response_token_ids=None), set()) == "no token ids"


def test_text_parts_and_missing_parts_read_as_text() -> None:
    parts = {
        "role": "tool",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    entry = call_entry(0, record(normalized_request={"messages": [parts]}, response=None), set())
    assert entry.last_message == "tool: a\nb" and entry.response_text == ""


def test_long_number_lists_are_elided_in_the_json_shown() -> None:
    value = {"prompt_token_ids": list(range(100)), "text": "x", "few": [1, 2]}
    assert elided(value)["prompt_token_ids"] == [0, 1, 2, 3, 4, 5, 6, 7, "… 92 more numbers"]
    assert elided(value)["few"] == [1, 2]
    assert '"text": "x"' in pretty(value)


def test_the_newest_item_as_sent_reads_every_providers_shape() -> None:
    from app.console.calls import sent_last

    anthropic = {"messages": [{"role": "user", "content": [{"type": "tool_result",
                 "content": "3 files"}]}]}  # fmt: skip
    responses = {"input": [{"type": "function_call_output", "output": "ok"}]}
    gemini = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    assert sent_last(anthropic) == "user: 3 files"
    assert sent_last(responses) == "function_call_output: ok"
    assert sent_last(gemini) == "user: hi"
    assert sent_last({"input": "plain"}) == "user: plain"
    assert sent_last(None) == "" and sent_last({}) == ""


def test_a_replica_is_shown_without_credentials_and_a_version_as_recorded() -> None:
    entry = call_entry(
        0, record(upstream_url="http://user:pw@10.0.0.5:8000/v1?k=s", policy_version=4), set()
    )
    assert entry.replica == "http://10.0.0.5:8000/v1" and entry.policy_version == 4
    assert replica_of("http://[::1]:9/v1") == "http://[::1]:9/v1"
    assert replica_of(None) is None and call_entry(0, record(), set()).replica is None


def test_a_context_overflow_and_a_resent_call_say_so() -> None:
    overflow = record(
        status_code=400,
        error="This model's maximum context length is 4096 tokens. However, your prompt "
        "contains 5000 input tokens.",
    )
    assert training_status(overflow, set()) == "context overflow"
    assert training_status(record(status_code=400, error="bad role"), set()) == "refused"
    # the same attempt sent the identical request again right after: the first's answer
    # never reached the harness (the build leaves it out as `resent`)
    first = record(record_id="r1", seq=1, started_at=1.0, finished_at=2.0)
    again = record(record_id="r2", seq=2, started_at=2.5, finished_at=3.0)
    unseen = unseen_reasons([first, again], {"r2"})
    assert unseen == {"r1": "resent"}
    assert training_status(first, {"r2"}, unseen).startswith("resent")
    assert unseen_reasons([first, again], {"r1", "r2"}) == {}  # all trained: not computed

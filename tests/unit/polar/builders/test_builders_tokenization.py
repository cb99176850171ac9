"""Missing prompt ids rebuilt with the tiny tokenizer, accepted only on the backend's count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from polar.builders import get_builder
from polar.records import CompletionRecord
from polar.tokenization import (
    end_of_turn_ids,
    load_tokenizer,
    rebuild_prompt_ids,
    render_prompt_ids,
    template_messages,
)
from tests.support.builders import (
    SYSTEM,
    TOOLS,
    TinyBackend,
    assistant_text,
    context,
    tokenizer_dir_fixture,  # noqa: F401  (the tokenizer_dir fixture)
    tool_result,
)


@pytest.fixture
def backend(tokenizer_dir: Path) -> TinyBackend:
    return TinyBackend(load_tokenizer(str(tokenizer_dir)))


def session(backend: TinyBackend, **call: Any) -> list[CompletionRecord]:
    """A two-call tool-use session; the second call's extra keyword arguments are `call`."""
    messages = [SYSTEM, {"role": "user", "content": "List the files."}]
    answer = backend.call(
        messages, assistant_text("", "List them.", [("bash", {"command": "ls -la"})]), tools=TOOLS
    )
    messages += [answer, tool_result(answer, "app.py")]
    backend.call(messages, assistant_text("One file."), tools=TOOLS, **call)
    return backend.records


def without_prompt_ids(record: CompletionRecord, **usage: int) -> CompletionRecord:
    response = dict(record.response or {})
    if usage:
        response["usage"] = usage
    elif "usage" in response:
        del response["usage"]
    return record.model_copy(
        update={"prompt_token_ids": None, "has_token_ids": False, "response": response}
    )


def test_rebuilt_prompt_ids_equal_the_backends(backend: TinyBackend, tokenizer_dir: Path) -> None:
    records = session(backend)
    tok = load_tokenizer(str(tokenizer_dir))
    for r in records:
        n = len(r.prompt_token_ids or [])
        rebuilt = rebuild_prompt_ids(without_prompt_ids(r, prompt_tokens=n), tok)
        assert rebuilt.problem is None and rebuilt.ids == r.prompt_token_ids
    # the tool-call arguments are parsed into objects before rendering, as vLLM does
    sent = records[1].normalized_request["messages"][2]
    assert isinstance(sent["tool_calls"][0]["function"]["arguments"], str)
    parsed = template_messages(records[1].normalized_request["messages"])[2]
    assert parsed["tool_calls"][0]["function"]["arguments"] == {"command": "ls -la"}
    assert end_of_turn_ids(str(tokenizer_dir))[0] == tok.eos_token_id


def test_builders_use_rebuilt_ids_and_say_so(backend: TinyBackend, tokenizer_dir: Path) -> None:
    records = session(backend)
    n = len(records[1].prompt_token_ids or [])
    stripped = [records[0], without_prompt_ids(records[1], prompt_tokens=n)]
    config = {"tokenizer": str(tokenizer_dir)}
    original = get_builder("prefix_merging")(records, context("prefix_merging", **config))
    rebuilt = get_builder("prefix_merging")(stripped, context("prefix_merging", **config))
    (a,), (b,) = original.traces, rebuilt.traces
    assert (a.prompt_ids, a.response_ids, a.loss_mask) == (
        b.prompt_ids,
        b.response_ids,
        b.loss_mask,
    )
    assert b.provenance.reconstruction.prompt_ids_rebuilt == ["r0001"]  # type: ignore[union-attr]
    per_request = get_builder("per_request")(stripped, context("per_request", **config))
    assert per_request.traces[1].prompt_ids == records[1].prompt_token_ids


def test_a_rebuild_that_disagrees_with_the_backend_is_unusable(
    backend: TinyBackend, tokenizer_dir: Path
) -> None:
    records = session(backend)
    n = len(records[1].prompt_token_ids or [])
    config = {"tokenizer": str(tokenizer_dir)}
    cases = {
        "rebuilt prompt has": without_prompt_ids(records[1], prompt_tokens=n + 1),
        "no usage.prompt_tokens": without_prompt_ids(records[1]),
    }
    for reason, bad in cases.items():
        out = get_builder("prefix_merging")([records[0], bad], context("prefix_merging", **config))
        assert len(out.traces) == 1 and len(out.unusable) == 1
        assert out.unusable[0].startswith("r0001: ") and reason in out.unusable[0]
    # no tokenizer configured: unusable, never guessed
    bad = without_prompt_ids(records[1], prompt_tokens=n)
    out = get_builder("per_request")([records[0], bad], context("per_request"))
    assert len(out.traces) == 1 and "no 'tokenizer'" in out.unusable[0]


def test_chat_template_kwargs_are_honoured(backend: TinyBackend, tokenizer_dir: Path) -> None:
    records = session(backend, chat_template_kwargs={"enable_thinking": False})
    tok = load_tokenizer(str(tokenizer_dir))
    target = records[1]
    request = target.normalized_request
    assert request["chat_template_kwargs"] == {"enable_thinking": False}
    assert render_prompt_ids(tok, request) == target.prompt_token_ids
    plain = {k: v for k, v in request.items() if k != "chat_template_kwargs"}
    assert render_prompt_ids(tok, plain) != target.prompt_token_ids
    # a server default applies unless the request says otherwise
    assert render_prompt_ids(tok, plain, {"enable_thinking": False}) == target.prompt_token_ids
    n = len(target.prompt_token_ids or [])
    assert rebuild_prompt_ids(without_prompt_ids(target, prompt_tokens=n), tok).ids == (
        target.prompt_token_ids
    )

"""`n > 1` through the gateway: every choice recorded, answered, and made its own trace.

OpenAI chat `n` and Google `candidateCount` against the scripted vLLM-shaped
backend (one scripted reply per choice) and the real SeaweedFS; whole and
streamed answers through the official SDKs; then both builders over the
stored records.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

import openai
import pytest
from google.genai import errors as genai_errors
from google.genai import types
from openai import OpenAI

from polar.builders import BuildContext, get_builder
from polar.records import CompletionRecord
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from tests.integration.test_gateway import assert_recorded_exactly, stack
from tests.support import text
from tests.support.tap import Tap
from tests.system.test_providers_google import client_for
from tests.unit.polar.builders.test_builders_choices import assert_each_choice_once

QUESTION = [{"role": "user", "content": "Name a fruit."}]
FRUITS = ["Apple.", "Banana.", "Cherry.", "Dates.", "Elder.", "Fig."]


def assert_every_choice_recorded(record: CompletionRecord, answer: dict[str, Any]) -> None:
    assert_recorded_exactly(record, answer)  # the top-level fields: choice 0
    assert [c.index for c in record.choices] == [0, 1, 2]
    for kept, choice in zip(record.choices, answer["choices"], strict=True):
        assert kept.response_token_ids == choice["token_ids"]
        assert kept.response_logprobs == [c["logprob"] for c in choice["logprobs"]["content"]]
        assert kept.finish_reason == choice["finish_reason"]


def assert_traced(records: list[CompletionRecord]) -> None:
    """per_request: one trace per choice, each with its call's prompt; both: each choice once."""
    for name in ("per_request", "prefix_merging"):
        ctx = BuildContext(session_id="s", task_id="t", harness="command", builder=name)
        out = get_builder(name)(records, ctx)
        assert_each_choice_once(records, out)
        if name == "per_request":
            assert len(out.traces) == 3 * len(records)
            prompts = [r.prompt_token_ids for r in records for _ in range(3)]
            assert [t.prompt_ids for t in out.traces] == prompts


def test_openai_n_every_choice_recorded_answered_and_traced(
    base_settings: Settings, storage: Storage
) -> None:
    with stack(base_settings, [text(f) for f in FRUITS]) as (backend, gateway):
        identity, key = gateway.session()
        client = gateway.client(key)
        whole = client.chat.completions.create(model="policy", messages=QUESTION, n=3)  # type: ignore[arg-type]
        streamed: dict[int, str] = defaultdict(str)
        finished: dict[int, str | None] = {}
        for chunk in client.chat.completions.create(
            model="policy",
            messages=QUESTION,  # type: ignore[arg-type]
            n=3,
            stream=True,
        ):
            for choice in chunk.choices:
                streamed[choice.index] += choice.delta.content or ""
                if choice.finish_reason:
                    finished[choice.index] = choice.finish_reason
        records = storage.list_completions(identity.session_id)

    assert [(c.index, c.message.content) for c in whole.choices] == list(enumerate(FRUITS[:3]))
    assert dict(streamed) == dict(enumerate(FRUITS[3:]))
    assert finished == {0: "stop", 1: "stop", 2: "stop"}
    assert [r["n"] for r in backend.requests] == [3, 3]
    assert len(records) == 2
    for record, answer in zip(records, backend.responses, strict=True):
        assert_every_choice_recorded(record, answer)
    assert_traced(records)


def test_google_candidate_count_behaves_the_same(base_settings: Settings, storage: Storage) -> None:
    """Before: `candidateCount: 3` was refused with a 400; now it is `n = 3`."""
    with stack(base_settings, [text(f) for f in FRUITS]) as (backend, gateway):
        identity, key = gateway.session()
        client = client_for(gateway.url, key, api_version="v1beta")
        config = types.GenerateContentConfig(candidate_count=3)
        whole = client.models.generate_content(model="policy", contents="Fruit?", config=config)
        streamed: dict[int, str] = defaultdict(str)
        finished: dict[int, Any] = {}
        for chunk in client.models.generate_content_stream(
            model="policy", contents="Fruit?", config=config
        ):
            for candidate in chunk.candidates or []:
                assert candidate.index is not None and candidate.content is not None
                streamed[candidate.index] += "".join(
                    p.text or "" for p in candidate.content.parts or []
                )
                if candidate.finish_reason:
                    finished[candidate.index] = candidate.finish_reason
        records = storage.list_completions(identity.session_id)

    candidates = whole.candidates or []
    assert (
        [(c.index, c.content.parts[0].text) for c in candidates]
        == list(  # type: ignore[union-attr,index]
            enumerate(FRUITS[:3])
        )
    )
    assert {c.finish_reason for c in candidates} == {types.FinishReason.STOP}
    assert dict(streamed) == dict(enumerate(FRUITS[3:]))
    assert set(finished.values()) == {types.FinishReason.STOP} and len(finished) == 3
    assert [r["n"] for r in backend.requests] == [3, 3]
    assert [r.provider for r in records] == ["google_generate"] * 2
    for record, answer in zip(records, backend.responses, strict=True):
        assert_every_choice_recorded(record, answer)
    assert_traced(records)


@pytest.mark.slow
def test_n_through_the_real_vllm(
    gateway: str, tap: Tap, storage: Storage, base_settings: Settings
) -> None:
    """OpenAI `n=3` and Google `candidateCount: 3` to the real vLLM: what it sampled, all of it."""
    session = f"s-choices-{uuid.uuid4().hex[:10]}"
    key = mint_session_key(SessionIdentity(session, "task-choices"), base_settings.session_secret)
    openai_client = OpenAI(base_url=f"{gateway}/v1", api_key=key, max_retries=0, timeout=120)
    whole = openai_client.chat.completions.create(
        model="policy",
        messages=QUESTION,  # type: ignore[arg-type]
        n=3,
        max_tokens=6,
        temperature=1.0,
    )
    google = client_for(gateway, key, api_version="v1beta")
    config = types.GenerateContentConfig(candidate_count=3, max_output_tokens=6, temperature=1.0)
    candidates = google.models.generate_content(model="policy", contents="Hi", config=config)
    records = storage.list_completions(session)

    assert len(whole.choices) == 3 and len(candidates.candidates or []) == 3
    assert [r.status_code for r in records] == [200, 200]
    answers = {
        ex.response["id"]: ex.response
        for ex in tap.exchanges
        if ex.status_code == 200 and ex.response is not None and "id" in ex.response
    }
    for record in records:
        answer = answers[(record.response or {})["id"]]
        assert record.prompt_token_ids == answer["prompt_token_ids"]
        assert [
            (c.response_token_ids, c.response_logprobs, c.finish_reason) for c in record.choices
        ] == [
            (c["token_ids"], [i["logprob"] for i in c["logprobs"]["content"]], c["finish_reason"])
            for c in answer["choices"]
        ]
    assert [c.message.content for c in whole.choices] == [
        c["message"]["content"] for c in answers[whole.id]["choices"]
    ]
    assert_traced(records)


def test_more_choices_than_the_cap_are_refused_in_the_callers_shape(
    base_settings: Settings, storage: Storage
) -> None:
    """Every choice is trained on, so `n` (and `candidateCount`) is capped: a 400 that the
    caller's SDK understands, nothing sent upstream, nothing recorded."""
    with stack(base_settings, [text("never")], max_choices=4) as (backend, gateway):
        identity, key = gateway.session()
        with pytest.raises(openai.BadRequestError) as refused:
            gateway.client(key).chat.completions.create(
                model="p",
                messages=QUESTION,  # type: ignore[arg-type]
                n=5,
            )
        google = client_for(gateway.url, key, api_version="v1beta")
        with pytest.raises(genai_errors.ClientError) as google_refused:
            google.models.generate_content(
                model="policy",
                contents="Fruit?",
                config=types.GenerateContentConfig(candidate_count=9),
            )
        records = storage.list_completions(identity.session_id)
    assert refused.value.status_code == 400 and "POLAR_MAX_CHOICES" in refused.value.message
    assert (refused.value.body or {}).get("param") == "n"  # type: ignore[union-attr]
    assert google_refused.value.code == 400 and "candidateCount=9" in str(google_refused.value)
    assert backend.requests == [] and records == []

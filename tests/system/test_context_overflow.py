"""A prompt past the real vLLM's context window (tiny model, 4,096 tokens), through the
gateway process: each provider's SDK gets its own overflow error, the call is recorded as
failed, and the model listings carry the window vLLM reports (`max_model_len`)."""

from __future__ import annotations

import re
import uuid

import anthropic
import httpx
import openai
import pytest

from polar.builders.base import usable
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from tests.support.polling import wait_until
from tests.support.tap import Tap

pytestmark = pytest.mark.slow

LONG = " ".join(f"src/module_{i}/file_{i}.py" for i in range(2500))  # well past 4,096 tokens


def test_overflow_in_each_dialect_against_the_real_vllm(
    gateway: str, tap: Tap, storage: Storage, base_settings: Settings
) -> None:
    session = f"s-overflow-{uuid.uuid4().hex[:10]}"
    key = mint_session_key(SessionIdentity(session, "task-overflow"), base_settings.session_secret)
    before = len(tap.exchanges)
    oai = openai.OpenAI(base_url=f"{gateway}/v1", api_key=key, max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as chat:
        oai.chat.completions.create(model="policy", messages=[{"role": "user", "content": LONG}])
    with pytest.raises(openai.BadRequestError) as responses:
        oai.responses.create(model="policy", input=LONG)
    claude = anthropic.Anthropic(base_url=gateway, api_key=key, max_retries=0, timeout=120)
    with pytest.raises(anthropic.BadRequestError) as messages:
        claude.messages.create(
            model="policy", max_tokens=16, messages=[{"role": "user", "content": LONG}]
        )
    google = httpx.post(
        f"{gateway}/v1beta/models/policy:generateContent",
        headers={"x-goog-api-key": key},
        json={"contents": [{"role": "user", "parts": [{"text": LONG}]}]},
        timeout=120,
    )

    # what vLLM itself answered: its 400 with its maximum context length
    real = tap.exchanges[before:]
    assert len(real) == 4 and all(ex.status_code == 400 for ex in real)
    assert all("maximum context length is 4096" in str(ex.response) for ex in real)

    for caught in (chat, responses):
        assert caught.value.status_code == 400
        assert caught.value.code == "context_length_exceeded"
    body = messages.value.body
    assert isinstance(body, dict) and body["type"] == "error", body
    pattern = r"prompt is too long: (\d+) tokens > 4096 maximum"
    said = re.fullmatch(pattern, body["error"]["message"])
    assert said and int(said[1]) > 4096, body
    assert body["error"]["type"] == "invalid_request_error"
    assert google.status_code == 400
    err = google.json()["error"]
    assert err["status"] == "INVALID_ARGUMENT" and "(4096)" in err["message"]

    records = storage.list_completions(session)
    assert len(records) == 4
    for record in records:
        assert record.status_code == 400 and not record.has_token_ids
        assert record.error and "maximum context length is 4096" in record.error
        assert usable(record) is not None  # a failed call: never trained


def test_model_listings_carry_vllms_context_window(gateway: str) -> None:
    def listed() -> bool:
        return httpx.get(f"{gateway}/v1/models").json()["data"][0].get("max_model_len") == 4096

    wait_until(listed, 30, "the gateway to learn the context window", every_s=0.5)
    claude = httpx.get(f"{gateway}/v1/models", headers={"anthropic-version": "2023-06-01"})
    assert claude.json()["data"][0]["max_input_tokens"] == 4096
    gemini = httpx.get(f"{gateway}/v1beta/models").json()["models"][0]
    assert gemini["inputTokenLimit"] == 4096

"""A prompt past the context window, answered in each provider's dialect through the gateway.

The scripted backend answers vLLM's 400 (its words, from vllm/renderers/params.py);
each official SDK gets the error its clients act on, and the call is recorded as a
failed call that no builder trains on. tests/system/test_context_overflow.py does the
same against the real vLLM.
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from polar.builders.base import usable
from polar.settings import Settings
from polar.storage import Storage
from tests.integration.test_gateway import MESSAGES, stack
from tests.support import error, text

VLLM_OVERFLOW = (
    "This model's maximum context length is 4096 tokens. However, your prompt contains "
    "5021 input tokens, which exceeds this limit even without any output tokens. "
    "Please reduce the length of the input prompt."
)


def test_each_provider_gets_its_own_overflow_error(
    base_settings: Settings, storage: Storage
) -> None:
    replies = [error(400, VLLM_OVERFLOW) for _ in range(5)] + [text("after compaction")]
    with stack(base_settings, replies) as (_, gateway):
        identity, key = gateway.session()
        oai = gateway.client(key)
        with pytest.raises(openai.BadRequestError) as chat:
            oai.chat.completions.create(model="policy", messages=MESSAGES)
        with pytest.raises(openai.BadRequestError) as streamed:
            oai.chat.completions.create(model="policy", messages=MESSAGES, stream=True)
        with pytest.raises(openai.BadRequestError) as responses:
            oai.responses.create(model="policy", input="List the files.")
        claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0, timeout=30)
        with pytest.raises(anthropic.BadRequestError) as messages:
            claude.messages.create(
                model="policy",
                max_tokens=64,
                messages=[{"role": "user", "content": "List the files."}],
            )
        google = httpx.post(
            f"{gateway.url}/v1beta/models/policy:generateContent",
            headers={"x-goog-api-key": key},
            json={"contents": [{"role": "user", "parts": [{"text": "List the files."}]}]},
        )
        # the harness compacts and goes on: the next call is served as usual
        after = oai.chat.completions.create(model="policy", messages=MESSAGES[:1])
        records = storage.list_completions(identity.session_id)

    for caught in (chat, streamed, responses):
        assert caught.value.status_code == 400
        assert caught.value.code == "context_length_exceeded"
        assert caught.value.type == "invalid_request_error"
    assert "maximum context length is 4096 tokens" in chat.value.message
    assert "resulted in 5021 tokens" in chat.value.message
    assert chat.value.param == "messages" and responses.value.param == "input"
    assert messages.value.status_code == 400
    assert messages.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 5021 tokens > 4096 maximum",
        },
    }
    assert google.status_code == 400
    assert google.json() == {
        "error": {
            "code": 400,
            "message": "The input token count (5021) exceeds the maximum number of tokens "
            "allowed (4096).",
            "status": "INVALID_ARGUMENT",
        }
    }
    assert after.choices[0].message.content == "after compaction"

    assert len(records) == 6
    failed, served = records[:5], records[5]
    for record in failed:  # recorded as failed calls, with vLLM's own words, never trained
        assert record.status_code == 400 and record.error == VLLM_OVERFLOW
        assert not record.has_token_ids
        assert (usable(record) or "").endswith(f"failed call ({VLLM_OVERFLOW})")
    assert served.status_code == 200 and usable(served) is None

"""Context overflow in each provider's dialect, and the context window in model listings."""

from __future__ import annotations

from typing import Any

import pytest

from polar.providers import APIError, ContextOverflow, get_provider
from proxy.upstream_answers import context_overflow
from proxy.upstream_replicas import model_window

# vLLM 0.32's words (vllm/renderers/params.py, `_token_len_check`)
VLLM = (
    "This model's maximum context length is 4096 tokens. However, your prompt contains "
    "5021 input tokens, which exceeds this limit even without any output tokens. "
    "Please reduce the length of the input prompt."
)
VLLM_CHARS = (  # its character pre-check: no token count
    "This model's maximum context length is 4096 tokens. However, your prompt contains "
    "40000 characters (more than 32768 characters, which is the upper bound for 4096 input "
    "tokens). Please reduce the length of the input prompt."
)
VLLM_OLD = (
    "This model's maximum context length is 4096 tokens. However, you requested 4300 tokens "
    "(4000 in the messages, 300 in the completion). Please reduce the length of the messages "
    "or completion."
)
SGLANG = "The input (5000 tokens) is longer than the model's context length (4096 tokens)."


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (VLLM, ContextOverflow(4096, 5021)),
        (VLLM_CHARS, ContextOverflow(4096, None)),
        (VLLM_OLD, ContextOverflow(4096, 4300)),
        (SGLANG, ContextOverflow(4096, 5000)),
        ("'messages' is a required property", None),
        ("max_tokens must be at least 1, got 0.", None),
    ],
)
def test_the_backends_overflow_messages_are_read(
    message: str, expected: ContextOverflow | None
) -> None:
    assert context_overflow(message) == expected


def render(provider: str, overflow: ContextOverflow) -> tuple[int, dict[str, Any]]:
    exc = APIError(400, VLLM, code="context_length_exceeded", overflow=overflow)
    return get_provider(provider).render_error(exc)


def test_openai_chat_says_context_length_exceeded() -> None:
    status, body = render("openai_chat", ContextOverflow(4096, 5021))
    assert status == 400
    assert body == {
        "error": {
            "message": "This model's maximum context length is 4096 tokens. However, your "
            "messages resulted in 5021 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def test_openai_responses_says_context_length_exceeded_on_input() -> None:
    status, body = render("openai_responses", ContextOverflow(4096, 5021))
    assert status == 400
    assert set(body) == {"error"}
    err = body["error"]
    assert (err["type"], err["param"], err["code"]) == (
        "invalid_request_error",
        "input",
        "context_length_exceeded",
    )
    assert err["message"].startswith("Your input exceeds the context window of this model.")


def test_anthropic_says_prompt_is_too_long() -> None:
    status, body = render("anthropic_messages", ContextOverflow(4096, 5021))
    assert status == 400
    assert body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 5021 tokens > 4096 maximum",
        },
    }
    _, unknown = render("anthropic_messages", ContextOverflow(4096))  # "at least" one past
    assert unknown["error"]["message"] == "prompt is too long: 4097 tokens > 4096 maximum"


def test_google_says_invalid_argument_with_the_counts() -> None:
    status, body = render("google_generate", ContextOverflow(4096, 5021))
    assert status == 400
    assert body == {
        "error": {
            "code": 400,
            "message": "The input token count (5021) exceeds the maximum number of tokens "
            "allowed (4096).",
            "status": "INVALID_ARGUMENT",
        }
    }


def test_other_errors_render_as_before() -> None:
    exc = APIError(400, "bad", code="invalid_value")
    assert get_provider("openai_chat").render_error(exc)[1]["error"]["code"] == "invalid_value"
    assert "prompt is too long" not in str(get_provider("anthropic_messages").render_error(exc))


def test_model_listings_carry_the_context_window() -> None:
    chat = get_provider("openai_chat").model_list(["policy"], 4096)["data"][0]
    assert chat["id"] == "policy" and chat["max_model_len"] == 4096
    claude = get_provider("anthropic_messages").model_list(["policy"], 4096)["data"][0]
    assert claude["max_input_tokens"] == 4096
    gemini = get_provider("google_generate").model_list(["policy"], 4096)["models"][0]
    assert (gemini["inputTokenLimit"], gemini["outputTokenLimit"]) == (4096, 4096)
    for name in ("openai_chat", "anthropic_messages", "google_generate"):
        card = get_provider(name).model_card("policy")
        assert not {"max_model_len", "max_input_tokens", "inputTokenLimit"} & set(card)


def test_model_window_reads_vllms_listing() -> None:
    listing = {
        "object": "list",
        "data": [
            {
                "id": "policy",
                "object": "model",
                "created": 1,
                "owned_by": "vllm",
                "root": "/models/tiny",
                "parent": None,
                "max_model_len": 4096,
                "permission": [],
            }
        ],
    }
    assert model_window(listing) == 4096
    assert model_window({"data": [{"id": "x"}]}) is None
    assert model_window({"error": "no"}) is None
    assert model_window([]) is None

"""Every provider API through the gateway process to the real vLLM (tiny local model).

What the scripted backend cannot show: that the real vLLM server accepts the
normalised requests (history with `reasoning_content` and tool calls, tool
results, prefill), and that the noise a harness adds between calls (Claude
Code's billing header, moving cache markers, string vs text-part content)
is gone at the token level: a later call's prompt ids start with an earlier
call's. The tap keeps what vLLM really sampled; records must match it.
"""

from __future__ import annotations

import uuid
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as gtypes

from polar.records import CompletionRecord
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from tests.support.tap import Tap

pytestmark = pytest.mark.slow

SHELL_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
}


@pytest.fixture
def key(base_settings: Settings) -> tuple[str, str]:
    """(session id, its key) of a fresh session."""
    session = f"s-vllm-{uuid.uuid4().hex[:10]}"
    identity = SessionIdentity(session, "task-vllm")
    return session, mint_session_key(identity, base_settings.session_secret)


def records_of(storage: Storage, session: str, n: int) -> list[CompletionRecord]:
    records = storage.list_completions(session)
    assert len(records) == n
    assert all(r.status_code == 200 and r.has_token_ids for r in records), records
    return records


def assert_prefix(earlier: CompletionRecord, later: CompletionRecord) -> None:
    ids = earlier.prompt_token_ids or []
    assert ids and (later.prompt_token_ids or [])[: len(ids)] == ids


def assert_sampled(records: list[CompletionRecord], tap: Tap) -> None:
    sampled = set(tap.sampled())
    for r in records:
        assert (
            tuple(r.prompt_token_ids or ()),
            tuple(r.response_token_ids or ()),
            tuple(r.response_logprobs or ()),
        ) in sampled


def test_anthropic_noise_is_gone_at_token_level(
    gateway: str, tap: Tap, storage: Storage, key: tuple[str, str]
) -> None:
    session, api_key = key
    client = anthropic.Anthropic(base_url=gateway, api_key=api_key, max_retries=0, timeout=120)
    tools: list[Any] = [{"name": "Bash", "description": "Run bash.", "input_schema": SHELL_SCHEMA}]

    def system(cch: str) -> list[Any]:
        return [
            {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2; cch={cch};"},
            {
                "type": "text",
                "text": "You are a coding agent.",
                "cache_control": {"type": "ephemeral"},
            },
        ]

    first_user: dict[str, Any] = {
        "role": "user",
        "content": [
            {"type": "text", "text": "List the files.", "cache_control": {"type": "ephemeral"}}
        ],
    }
    first = client.messages.create(
        model="policy",
        max_tokens=6,
        system=system("aa"),  # type: ignore[arg-type]
        messages=[first_user],
        tools=tools,
    )
    history: list[Any] = [
        {"role": "user", "content": "List the files."},  # string now, list before
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Use Bash.", "signature": "s"},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "a.py"}],
                }
            ],
        },
    ]
    with client.messages.stream(
        model="policy",
        max_tokens=6,
        system=system("bb"),  # type: ignore[arg-type]
        messages=history,
        tools=tools,
    ) as stream:
        second = stream.get_final_message()
    prefill = client.messages.create(
        model="policy",
        max_tokens=4,
        messages=[{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi"}],
    )
    assert first.content and second.content and prefill.content
    records = records_of(storage, session, 3)
    assert [r.provider for r in records] == ["anthropic_messages"] * 3
    assert_prefix(records[0], records[1])
    assert records[2].normalized_request["continue_final_message"] is True
    assert_sampled(records, tap)


def test_responses_history_through_vllm(
    gateway: str, tap: Tap, storage: Storage, key: tuple[str, str]
) -> None:
    session, api_key = key
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key=api_key, max_retries=0, timeout=120)
    tools: list[Any] = [
        {"type": "function", "name": "exec_command", "parameters": SHELL_SCHEMA},
        {"type": "web_search"},
    ]
    start: list[Any] = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "You are Codex."}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ls?"}]},
    ]
    first = client.responses.create(
        model="policy", input=start, tools=tools, max_output_tokens=6, store=False
    )
    history = [
        *start,
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Run ls."}],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "exec_command",
            "arguments": '{"command":"ls"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "a.py\n"},
    ]
    events = list(
        client.responses.create(
            model="policy", input=history, tools=tools, max_output_tokens=6, stream=True
        )
    )
    assert first.output and events[-1].type in ("response.completed", "response.incomplete")
    records = records_of(storage, session, 2)
    assert [r.provider for r in records] == ["openai_responses"] * 2
    assert_prefix(records[0], records[1])
    assert_sampled(records, tap)


def test_google_function_history_through_vllm(
    gateway: str, tap: Tap, storage: Storage, key: tuple[str, str]
) -> None:
    session, api_key = key
    client = genai.Client(
        api_key=api_key,
        http_options=gtypes.HttpOptions(
            base_url=gateway,
            api_version="v1beta",
            timeout=120_000,
            retry_options=gtypes.HttpRetryOptions(attempts=1),
        ),
    )
    config = gtypes.GenerateContentConfig(
        system_instruction="You are a coding agent.",
        max_output_tokens=6,
        tools=[
            gtypes.Tool(
                function_declarations=[
                    gtypes.FunctionDeclaration(
                        name="run_shell", parameters_json_schema=SHELL_SCHEMA
                    )
                ]
            )
        ],
        automatic_function_calling=gtypes.AutomaticFunctionCallingConfig(disable=True),
    )
    question = gtypes.Content(role="user", parts=[gtypes.Part.from_text(text="ls?")])
    first = client.models.generate_content(model="policy", contents=[question], config=config)
    history = [
        question,
        gtypes.Content(
            role="model",
            parts=[gtypes.Part.from_function_call(name="run_shell", args={"command": "ls"})],
        ),
        gtypes.Content(
            role="user",
            parts=[
                gtypes.Part.from_function_response(name="run_shell", response={"output": "a.py"})
            ],
        ),
    ]
    chunks = list(
        client.models.generate_content_stream(model="policy", contents=history, config=config)
    )
    assert first.candidates and chunks and chunks[-1].usage_metadata
    records = records_of(storage, session, 2)
    assert [r.provider for r in records] == ["google_generate"] * 2
    assert_prefix(records[0], records[1])
    assert_sampled(records, tap)

"""A vLLM stand-in over the tiny Qwen3-style tokenizer, for benchmarks and tests of builders.

`TinyBackend` plays vLLM's chat server with the project's tiny Qwen3-style
tokenizer: prompts rendered by `apply_chat_template` (tool-call arguments
parsed to objects first, as vLLM does), sampled tokens given as the text the
model wrote (tokenised alone, plus the end token when it stopped), answers
parsed like vLLM's Qwen3 reasoning and Hermes tool parsers (arguments
re-dumped with `json.dumps`). `record` makes a CompletionRecord from token
lists. Used by bench/bench_builders.py, bench/drifting_sessions.py and the
builder tests (tests/support/builders.py).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from polar.records import CompletionRecord

REPO = Path(__file__).resolve().parent.parent
TINY_MODEL = REPO / ".polar" / "models" / "tiny-qwen3"

SYSTEM = {"role": "system", "content": "You are a helpful coding assistant."}


def logprobs_for(n: int, salt: int) -> list[float]:
    """Distinct, reproducible logprobs (so a misplaced one is noticed)."""
    return [-((salt * 31 + i * 7) % 97) / 10.0 - 0.001 * (i % 5) for i in range(n)]


def record(
    n: int,
    prompt: Sequence[int] | None,
    response: Sequence[int],
    *,
    finish: str = "stop",
    messages: list[dict[str, Any]] | None = None,
    answer: dict[str, Any] | None = None,
    attempt: int = 1,
    usage: dict[str, int] | None = None,
    request_extra: dict[str, Any] | None = None,
) -> CompletionRecord:
    """A CompletionRecord with sequence number `n` and the given token ids."""
    body: dict[str, Any] = {"choices": [{"message": answer or {"role": "assistant"}}]}
    body["choices"][0]["finish_reason"] = finish
    if usage is not None:
        body["usage"] = usage
    request = {"model": "policy", "messages": messages or [], **(request_extra or {})}
    return CompletionRecord(
        session_id="s1",
        task_id="t1",
        seq=1_000 + n,
        record_id=f"r{n:04d}",
        attempt=attempt,
        request=request,
        normalized_request=request,
        response=body,
        model="policy",
        prompt_token_ids=list(prompt) if prompt is not None else None,
        response_token_ids=list(response),
        response_logprobs=logprobs_for(len(response), n),
        finish_reason=finish,
        has_token_ids=prompt is not None,
        started_at=float(n),
        finished_at=float(n) + 0.5,
    )


THINK = re.compile(r"^\s*<think>\n?(.*?)\n?</think>\s*", re.S)
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def assistant_text(
    content: str = "", reasoning: str | None = None, calls: Sequence[tuple[str, dict]] = ()
) -> str:
    """What a model following the template writes for a turn (without its end token)."""
    text = f"<think>\n{reasoning}\n</think>\n\n{content}" if reasoning is not None else content
    for i, (name, arguments) in enumerate(calls):
        if content or i:
            text += "\n"
        call = f'{{"name": "{name}", "arguments": {json.dumps(arguments)}}}'
        text += f"<tool_call>\n{call}\n</tool_call>"
    return text


def parse_answer(text: str, n: int) -> dict[str, Any]:
    """The assistant message vLLM's Qwen3 reasoning + Hermes tool parsers make of `text`."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    match = THINK.match(text)
    if match:
        message["reasoning_content"] = match.group(1)
        text = text[match.end() :]
    elif text.lstrip().startswith("<think>"):  # cut inside the reasoning
        message["reasoning_content"] = text.lstrip()[len("<think>") :].lstrip("\n")
        return message
    calls = []
    for i, block in enumerate(TOOL_CALL.findall(text)):
        call = json.loads(block)
        calls.append(
            {
                "id": f"call_{n}_{i}",
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
            }
        )
    content = TOOL_CALL.sub("", text).strip()
    message["content"] = content or None
    if calls:
        message["tool_calls"] = calls
    return message


class TinyBackend:
    """A vLLM stand-in over the tiny tokenizer; records every call it answers."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.eos = tokenizer.eos_token_id
        self.records: list[CompletionRecord] = []

    def render(self, messages: list[dict[str, Any]], tools: Any, **kwargs: Any) -> list[int]:
        msgs = copy.deepcopy(messages)
        for m in msgs:
            for call in m.get("tool_calls") or []:
                if isinstance(call["function"].get("arguments"), str):
                    call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        ids = self.tok.apply_chat_template(
            msgs,
            tools=tools,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            **kwargs,
        )
        return list(ids)

    def call(
        self,
        messages: list[dict[str, Any]],
        text: str,
        *,
        tools: list[dict[str, Any]] | None = None,
        finish: str = "stop",
        attempt: int = 1,
        prompt_ids: bool = True,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Answer `messages` with the model writing `text`; record it; the assistant message."""
        n = len(self.records)
        kwargs = chat_template_kwargs or {}
        prompt = self.render(messages, tools, **kwargs)
        response = self.tok.encode(text, add_special_tokens=False)
        if finish == "stop":
            response.append(self.eos)
        answer = parse_answer(text, n)
        extra: dict[str, Any] = {}
        if tools:
            extra["tools"] = tools
        if chat_template_kwargs:
            extra["chat_template_kwargs"] = chat_template_kwargs
        rec = record(
            n,
            prompt if prompt_ids else None,
            response,
            finish=finish,
            messages=copy.deepcopy(messages),
            answer=answer,
            attempt=attempt,
            usage={"prompt_tokens": len(prompt), "completion_tokens": len(response)},
            request_extra=extra,
        )
        self.records.append(rec)
        return answer


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


def tool_result(answer: dict[str, Any], output: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"], "content": output}

"""Rebuild a call's prompt token ids with the model's tokenizer when the backend gave none.

Builders prefer the backend's own prompt ids. When a record lacks them, the
prompt is rendered again the way vLLM's OpenAI server renders a chat request:
the normalised request's `messages`, `tools`, `chat_template_kwargs`,
`add_generation_prompt` (default true), `continue_final_message`, `documents`
and `chat_template` go through `transformers`' `apply_chat_template`, after
vLLM's two message rewrites (text-part lists joined with newlines, tool-call
`arguments` JSON strings parsed into objects). The result is accepted only if
its length equals the prompt token count the backend reported
(`response.usage.prompt_tokens`); anything else makes the record unusable with
a reason, never a guess. Length agreement is the only check the backend's
answer allows; it catches a different template, missing tools or kwargs, and
a different tokenizer, though not a same-length substitution.

`transformers` is imported lazily: workflows import the builders, never this
module's heavy dependencies.
"""

from __future__ import annotations

import contextlib
import copy
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from polar.records import CompletionRecord

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

TEMPLATE_REQUEST_KEYS = (
    "add_generation_prompt",
    "continue_final_message",
    "documents",
    "chat_template",
)


@lru_cache(maxsize=8)
def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The tokenizer (with its chat template) in local directory or cached hub id `path`."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def end_of_turn_ids(path: str) -> list[int]:
    """End-of-turn token ids of the model at `path`: the tokenizer's eos and generation config's.

    Qwen-style models stop on several ids (`generation_config.json` lists them);
    all count as end of turn.
    """
    ids: list[int] = []
    eos = load_tokenizer(path).eos_token_id
    if isinstance(eos, int):
        ids.append(eos)
    config = Path(path) / "generation_config.json"
    if config.is_file():
        value = json.loads(config.read_text(encoding="utf-8")).get("eos_token_id")
        for token in value if isinstance(value, list) else [value]:
            if isinstance(token, int) and token not in ids:
                ids.append(token)
    return ids


def _text_parts(content: list[Any]) -> str | None:
    """vLLM's 'string' content format: a list of text parts becomes one newline-joined string."""
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        else:
            return None  # an image or other part: leave the list to the template
    return "\n".join(texts)


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as vLLM hands them to a chat template (a deep copy, rewritten).

    Text-part lists become newline-joined strings and tool-call `arguments`
    strings are parsed into objects (an empty string becomes `{}`), as vLLM
    does before rendering. This parse is why re-rendered tool calls can differ
    from the tokens the model sampled (`BreakKind.TOOL_CALL_RERENDERED`).
    """
    out = copy.deepcopy(messages)
    for message in out:
        content = message.get("content")
        if isinstance(content, list):
            joined = _text_parts(content)
            if joined is not None:
                message["content"] = joined
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                # unparsable: the template gets the string; the length check decides
                with contextlib.suppress(ValueError):
                    function["arguments"] = json.loads(arguments) if arguments else {}
            elif arguments is None:
                function["arguments"] = {}
    return out


def render_prompt_ids(
    tokenizer: PreTrainedTokenizerBase,
    request: dict[str, Any],
    default_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """Token ids of the prompt the backend built from `request` (a normalised chat request).

    `default_kwargs` are the server's default chat-template kwargs (vLLM's
    `--default-chat-template-kwargs`); the request's `chat_template_kwargs` win.
    """
    kwargs: dict[str, Any] = dict(default_kwargs or {})
    kwargs.update(request.get("chat_template_kwargs") or {})
    for key in TEMPLATE_REQUEST_KEYS:
        if request.get(key) is not None:
            kwargs[key] = request[key]
    kwargs.setdefault("add_generation_prompt", True)
    if kwargs.get("continue_final_message"):
        kwargs["add_generation_prompt"] = False
    ids = tokenizer.apply_chat_template(
        template_messages(list(request.get("messages") or [])),
        tools=request.get("tools") or None,
        tokenize=True,
        return_dict=False,
        **kwargs,
    )
    if not _is_token_ids(ids):
        raise TypeError(f"the chat template rendered a {type(ids).__name__}, not token ids")
    return ids


def _is_token_ids(value: object) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(isinstance(i, int) for i in value)


def reported_prompt_tokens(record: CompletionRecord) -> int | None:
    """The prompt token count the backend reported (`usage.prompt_tokens`), if any."""
    usage = (record.response or {}).get("usage")
    count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return count if type(count) is int else None


@dataclass(frozen=True)
class RebuiltPrompt:
    """Prompt ids rebuilt by the tokenizer, or why they could not be trusted."""

    ids: list[int] | None
    problem: str | None = None


def rebuild_prompt_ids(
    record: CompletionRecord,
    tokenizer: PreTrainedTokenizerBase,
    default_kwargs: dict[str, Any] | None = None,
) -> RebuiltPrompt:
    """Render `record`'s prompt again; accept it only if its length matches the backend's count."""
    expected = reported_prompt_tokens(record)
    if expected is None:
        return RebuiltPrompt(None, "no prompt ids and no usage.prompt_tokens to check a rebuild")
    try:
        ids = render_prompt_ids(tokenizer, record.normalized_request, default_kwargs)
    except Exception as exc:  # a template error is data, not a crash of the build
        return RebuiltPrompt(None, f"chat template failed: {type(exc).__name__}: {exc}")
    if len(ids) != expected:
        return RebuiltPrompt(
            None,
            f"rebuilt prompt has {len(ids)} tokens but the backend reported {expected}",
        )
    return RebuiltPrompt(ids)

"""Chat Completions answers as Google generateContent responses, whole or as stream chunks."""

from __future__ import annotations

from typing import Any

from polar.providers.base import (
    CallContext,
    dict_at,
    new_id,
    parse_arguments,
    reasoning_of,
    split_text,
    usage_of,
)

__all__ = [
    "answer_choices",
    "candidate_of",
    "choice_parts",
    "finish_reason",
    "response_of",
    "stream_chunks",
    "usage_metadata",
]

FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}


def choice_parts(choice: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts of one Chat choice's message: thought text, text, function calls."""
    message = dict_at(choice, "message")
    parts: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        parts.append({"text": reasoning, "thought": True})
    if isinstance(message.get("content"), str) and message["content"]:
        parts.append({"text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(
            {
                "functionCall": {
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "args": parse_arguments(function.get("arguments")),
                }
            }
        )
    return parts or [{"text": ""}]


def answer_choices(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """Every choice of a Chat answer (one empty choice if it has none)."""
    choices = answer.get("choices")
    kept: list[dict[str, Any]] = (
        [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []
    )
    return kept or [{}]


def usage_metadata(answer: dict[str, Any]) -> dict[str, int]:
    prompt, completion = usage_of(answer)
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion,
        "totalTokenCount": prompt + completion,
    }


def candidate_of(parts: list[dict[str, Any]], index: int, finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": index}
    if finish is not None:
        candidate["finishReason"] = finish
    return candidate


def finish_reason(choice: dict[str, Any]) -> str:
    return FINISH.get(str(choice.get("finish_reason")), "STOP")


def response_of(
    candidates: list[dict[str, Any]], call: CallContext, response_id: str, **extra: Any
) -> dict[str, Any]:
    return {
        "candidates": candidates,
        "modelVersion": call.model or "",
        "responseId": response_id,
    } | extra


def stream_chunks(answer: dict[str, Any], call: CallContext) -> list[dict[str, Any]]:
    """The chunks of a streamed answer, candidate after candidate.

    Each candidate's last chunk carries its finishReason; the last chunk also usage.
    """
    response_id = new_id("")
    chunks: list[dict[str, Any]] = []
    for position, choice in enumerate(answer_choices(answer)):
        pieces: list[list[dict[str, Any]]] = []
        calls: list[dict[str, Any]] = []
        for part in choice_parts(choice):
            if "functionCall" in part:
                calls.append(part)
            else:
                extra = {"thought": True} if part.get("thought") else {}
                pieces.extend([{"text": p} | extra] for p in split_text(part["text"]) or [""])
        if calls:
            pieces.append(calls)
        index = choice.get("index", position)
        for k, piece in enumerate(pieces):
            finish = finish_reason(choice) if k == len(pieces) - 1 else None
            chunks.append(response_of([candidate_of(piece, index, finish)], call, response_id))
    chunks[-1]["usageMetadata"] = usage_metadata(answer)
    return chunks

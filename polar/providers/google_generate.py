"""Google generateContent (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent`).

Request: `systemInstruction` -> a system message; `contents` (`user` /
`model` turns of `parts`) -> the conversation: `text` (`thought: true` ->
`reasoning_content`), `inlineData` / `fileData` images, `functionCall` ->
`tool_calls`, `functionResponse` -> `tool` messages. Calls without an `id`
get one from their position (`call_{turn}_{part}`), and a response without
one is matched to the earliest open call of that name, so the same history
always renders the same prompt. `tools[].functionDeclarations` -> functions
(schemas, `parameters` and `parametersJsonSchema`, as JSON Schema: `json_schema`);
other tools (`googleSearch`, `codeExecution`, ...) are dropped.
`toolConfig.functionCallingConfig` -> `tool_choice`; `generationConfig`
`maxOutputTokens`, `temperature`, `topP`, `topK`, `stopSequences`, `seed`,
penalties, JSON output and `candidateCount` (-> `n`: every candidate is
recorded, each its own trace) are mapped. Field names are accepted in camelCase
or snake_case, as Google's own JSON parser does.

Answer: a `GenerateContentResponse`; `:streamGenerateContent?alt=sse` gets
`data:` chunks (thought text, text, function calls; the last chunk carries
`finishReason` and `usageMetadata`; several candidates stream one after the
other, each ending on its `finishReason`), without `alt=sse` a JSON array of
the same chunks. Errors are `{"error": {"code", "message", "status"}}`.

The request is mapped in google_request.py, the answer in google_answer.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from polar.providers.base import (
    CallContext,
    ContextOverflow,
    ProviderAPI,
    bad_request,
    malformed_is_400,
    new_id,
    require_object,
    sse,
)
from polar.providers.canonical import canonical_messages
from polar.providers.google_answer import (
    answer_choices,
    candidate_of,
    choice_parts,
    finish_reason,
    response_of,
    stream_chunks,
    usage_metadata,
)
from polar.providers.google_request import (
    chat_messages,
    generation_settings,
    get,
    map_tool_choice,
    map_tools,
)
from polar.providers.request_models import check_google

__all__ = ["ACTIONS", "GoogleGenerate", "split_action"]

STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

ACTIONS = ("generateContent", "streamGenerateContent", "countTokens")

_ACTION = re.compile(r"/models/[^:]+:(" + "|".join(ACTIONS) + r")$")


class GoogleGenerate(ProviderAPI):
    """Google generateContent over Chat Completions (see the module)."""

    name = "google_generate"

    def detect(self, path: str, headers: Mapping[str, str]) -> bool:
        if _ACTION.search(path) or path.startswith("/v1beta/") or path == "/v1beta":
            return True
        listing = path.rstrip("/").endswith("/models") or "/models/" in path
        return listing and "x-goog-api-key" in {k.lower() for k in headers}

    @malformed_is_400
    def to_chat(self, request: dict[str, Any], call: CallContext) -> dict[str, Any]:
        request = require_object(request)
        inner = get(request, "generateContentRequest")
        if isinstance(inner, dict):  # countTokens may wrap a whole request
            request = inner
        check_google(request)  # the API's 400s: contents, roles, config types
        if get(request, "cachedContent"):
            raise bad_request(
                "cachedContent needs server-side state, which this gateway does not keep",
                param="cachedContent",
            )
        chat: dict[str, Any] = {"messages": canonical_messages(chat_messages(request))}
        if call.model:
            chat["model"] = call.model.removeprefix("models/")
        tools = map_tools(request.get("tools"))
        if tools:
            chat["tools"] = tools
            choice = map_tool_choice(get(request, "toolConfig"))
            if choice is not None:
                chat["tool_choice"] = choice
        return chat | generation_settings(get(request, "generationConfig"))

    def wants_stream(self, request: dict[str, Any], call: CallContext) -> bool:
        return call.action == "streamGenerateContent"

    def stream_media_type(self, call: CallContext) -> str:
        return "text/event-stream" if call.query.get("alt") == "sse" else "application/json"

    def from_chat(
        self, answer: dict[str, Any], request: dict[str, Any], call: CallContext
    ) -> dict[str, Any]:
        candidates = [
            candidate_of(choice_parts(choice), choice.get("index", position), finish_reason(choice))
            for position, choice in enumerate(answer_choices(answer))
        ]
        return response_of(candidates, call, new_id(""), usageMetadata=usage_metadata(answer))

    def stream_events(
        self, answer: dict[str, Any], request: dict[str, Any], call: CallContext
    ) -> Iterator[str]:
        chunks = stream_chunks(answer, call)
        if call.query.get("alt") == "sse":
            for chunk in chunks:
                yield sse(chunk)
            return
        yield "[" + ",\n".join(json.dumps(c, separators=(",", ":")) for c in chunks) + "]"

    def error_body(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
    ) -> dict[str, Any]:
        grpc = STATUSES.get(status) or ("INVALID_ARGUMENT" if status < 500 else "INTERNAL")
        return {"error": {"code": status, "message": message, "status": grpc}}

    def overflow_error(self, overflow: ContextOverflow) -> tuple[int, dict[str, Any]]:
        """Gemini's INVALID_ARGUMENT with the token counts."""
        message = (
            f"The input token count ({overflow.tokens}) exceeds the maximum number of tokens "
            f"allowed ({overflow.limit})."
        )
        return 400, self.error_body(400, message)

    def model_list(self, names: list[str], context_window: int | None = None) -> dict[str, Any]:
        return {"models": [self.model_card(n, context_window) for n in names]}

    def model_card(self, name: str, context_window: int | None = None) -> dict[str, Any]:
        bare = name.removeprefix("models/")
        card: dict[str, Any] = {
            "name": f"models/{bare}",
            "version": "001",
            "displayName": bare,
            "description": "served by the Polar gateway",
            "supportedGenerationMethods": [
                "generateContent",
                "streamGenerateContent",
                "countTokens",
            ],
        }
        if context_window is not None:
            card["inputTokenLimit"] = card["outputTokenLimit"] = context_window
        return card

    def token_count(self, count: int, approximate: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"totalTokens": count}
        if approximate:
            out["approximate"] = True
        return out


def split_action(target: str) -> tuple[str, str | None]:
    """`'policy:generateContent'` -> `('policy', 'generateContent')`; no action -> None."""
    model, sep, action = target.rpartition(":")
    if sep and action in ACTIONS:
        return model, action
    return target, None

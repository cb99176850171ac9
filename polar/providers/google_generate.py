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
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from typing import Any

from polar.providers.base import (
    CallContext,
    ContextOverflow,
    ProviderAPI,
    arr,
    bad_request,
    dict_at,
    malformed_is_400,
    new_id,
    parse_arguments,
    reasoning_of,
    require_object,
    split_text,
    sse,
    usage_of,
)
from polar.providers.canonical import canonical_json, canonical_messages

log = logging.getLogger("polar.providers")

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
FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}
ACTIONS = ("generateContent", "streamGenerateContent", "countTokens")
_ACTION = re.compile(r"/models/[^:]+:(" + "|".join(ACTIONS) + r")$")


def get(obj: Any, camel: str) -> Any:
    """`obj[camel]`, or its snake_case spelling."""
    if not isinstance(obj, dict):
        return None
    if camel in obj:
        return obj[camel]
    return obj.get(re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower())


SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
SCHEMA_ONE = ("items", "additionalProperties", "not")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SCHEMA_INTS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")
SCHEMA_DROPPED = ("propertyOrdering", "nullable", "example")
_SNAKE = {
    re.sub(r"([A-Z])", r"_\1", k).lower(): k
    for k in (*SCHEMA_MAPS, *SCHEMA_ONE, *SCHEMA_LISTS, *SCHEMA_INTS, *SCHEMA_DROPPED)
}


def _schema_type(value: Any) -> Any:
    """A type (or list of types) lower-cased; Google's `TYPE_UNSPECIFIED` is None."""
    if isinstance(value, list):
        kept = [_schema_type(v) for v in value]
        return [v for v in kept if v is not None]
    if not isinstance(value, str):
        return value
    lowered = value.lower()
    return None if lowered == "type_unspecified" else lowered


def _nullable(out: dict[str, Any]) -> dict[str, Any]:
    """`out` that also accepts null: in its type, its enum, or as one more `anyOf` branch."""
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"] if kind != "null" else kind
    elif isinstance(kind, list) and "null" not in kind:
        out["type"] = [*kind, "null"]
    elif kind is None and isinstance(out.get("anyOf"), list):
        out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    if isinstance(out.get("enum"), list) and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out


def json_schema(schema: Any) -> Any:
    """A Gemini (OpenAPI-style) Schema as JSON Schema that vLLM's grammars accept.

    Types lower-cased (`TYPE_UNSPECIFIED` dropped); `nullable: true` folded
    into the type (`[t, "null"]`), the enum, or an `anyOf` null branch;
    Google-only keys (`propertyOrdering`, `nullable`, `example`, `format:
    enum`) dropped; int64 bounds sent as strings made integers; snake_case
    keys camelCased; nested `properties` / `items` / `anyOf` ... recursed.
    `enum`, `format`, `required`, `description` and the rest are kept. Plain
    JSON Schema comes out unchanged, so it is safe on `*JsonSchema` fields too.
    """
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for raw_key, value in schema.items():
        key = _SNAKE.get(raw_key) or raw_key
        if key in SCHEMA_DROPPED or (key == "format" and value == "enum"):
            continue
        if key == "type":
            kind = _schema_type(value)
            if kind is not None and kind != []:
                out[key] = kind
        elif key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: json_schema(v) for name, v in value.items()}
        elif key in SCHEMA_ONE or key in SCHEMA_LISTS:
            out[key] = json_schema(value)
        elif key in SCHEMA_INTS and isinstance(value, str) and value.isdigit():
            out[key] = int(value)
        else:
            out[key] = value
    nullable = schema.get("nullable")
    return _nullable(out) if nullable is True or nullable == "true" else out


# --------------------------------------------------------------------------- request


def _media_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    inline, file = get(part, "inlineData"), get(part, "fileData")
    if isinstance(inline, dict):
        mime = get(inline, "mimeType") or ""
        url = f"data:{mime};base64,{inline.get('data') or ''}"
    else:
        mime, url = get(file, "mimeType") or "", get(file, "fileUri")
    if not str(mime).startswith("image/") or not isinstance(url, str):
        raise bad_request(f"{where}: only image media is supported by this gateway", param=where)
    return {"type": "image_url", "image_url": {"url": url}}


class _Calls:
    """Ids of function calls, so that responses find their call."""

    def __init__(self) -> None:
        self.open: list[tuple[str, str]] = []  # (name, id), oldest first

    def call(self, fc: dict[str, Any], turn: int, index: int) -> str:
        call_id = fc.get("id") or f"call_{turn}_{index}"
        self.open.append((str(fc.get("name")), call_id))
        return call_id

    def response(self, fr: dict[str, Any]) -> str:
        name = str(fr.get("name"))
        wanted = fr.get("id")
        for i, (open_name, call_id) in enumerate(self.open):
            if (wanted and call_id == wanted) or (not wanted and open_name == name):
                del self.open[i]
                return call_id
        return wanted or f"call_{name}"


def _model_turn(parts: list[Any], turn: int, calls: _Calls, where: str) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for k, part in enumerate(parts):
        fc = get(part, "functionCall")
        if isinstance(fc, dict):
            tool_calls.append(
                {
                    "id": calls.call(fc, turn, k),
                    "type": "function",
                    "function": {
                        "name": fc.get("name"),
                        "arguments": canonical_json(fc.get("args") or {}),
                    },
                }
            )
        elif isinstance(get(part, "text"), str):
            (thoughts if part.get("thought") else texts).append(part["text"])
        elif not (
            isinstance(part, dict)
            and set(part) <= {"thoughtSignature", "thought_signature", "thought"}
        ):
            raise bad_request(
                f"{where}.parts[{k}]: part not supported by this gateway", param=where
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def _user_turn(parts: list[Any], calls: _Calls, where: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    for k, part in enumerate(parts):
        fr = get(part, "functionResponse")
        if isinstance(fr, dict):
            response = fr.get("response")
            text = canonical_json(response if response is not None else {})
            results.append({"role": "tool", "tool_call_id": calls.response(fr), "content": text})
        elif isinstance(get(part, "text"), str):
            content.append({"type": "text", "text": part["text"]})
        elif isinstance(part, dict) and (get(part, "inlineData") or get(part, "fileData")):
            content.append(_media_part(part, f"{where}.parts[{k}]"))
        else:
            raise bad_request(
                f"{where}.parts[{k}]: part not supported by this gateway", param=where
            )
    return results + ([{"role": "user", "content": content}] if content else [])


def chat_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Chat messages for `systemInstruction` and `contents`."""
    out: list[dict[str, Any]] = []
    system = get(request, "systemInstruction")
    if isinstance(system, str):
        system = {"parts": [{"text": system}]}
    if isinstance(system, dict):
        parts = arr(system.get("parts"), "systemInstruction.parts")
        texts = [p["text"] for p in parts if isinstance(get(p, "text"), str)]
        if texts:
            out.append({"role": "system", "content": "\n".join(texts)})
    contents = request.get("contents")
    if isinstance(contents, dict):
        contents = [contents]
    if not isinstance(contents, list) or not contents:
        raise bad_request("contents is not specified", param="contents")
    calls = _Calls()
    for i, content in enumerate(contents):
        where = f"contents[{i}]"
        turn_parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(turn_parts, list):
            raise bad_request(f"{where}.parts must be an array", param=where)
        if content.get("role") == "model":
            out.append(_model_turn(turn_parts, i, calls, where))
        else:
            out.extend(_user_turn(turn_parts, calls, where))
    return out


def map_tools(tools: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    dropped: list[str] = []
    for tool in arr(tools, "tools"):
        declarations = get(tool, "functionDeclarations")
        if not isinstance(declarations, list):
            dropped.extend(list(tool) if isinstance(tool, dict) else [str(tool)])  # kinds
            continue
        for decl in declarations:
            if not isinstance(get(decl, "name"), str):
                raise bad_request("each function declaration needs a 'name'", param="tools")
            function: dict[str, Any] = {"name": get(decl, "name")}
            if isinstance(get(decl, "description"), str):
                function["description"] = get(decl, "description")
            raw = get(decl, "parametersJsonSchema")
            params = json_schema(raw if isinstance(raw, dict) else get(decl, "parameters"))
            function["parameters"] = params if isinstance(params, dict) else {"type": "object"}
            out.append({"type": "function", "function": function})
    if dropped:
        log.info("generateContent: dropped tools the upstream cannot serve: %s", dropped)
    return out


def map_tool_choice(config: Any) -> Any:
    fcc = get(config, "functionCallingConfig")
    mode = str(get(fcc, "mode") or "").upper()
    names = get(fcc, "allowedFunctionNames") or []
    if mode in ("ANY", "VALIDATED") and len(names) == 1:
        return {"type": "function", "function": {"name": names[0]}}
    return {"ANY": "required", "NONE": "none", "AUTO": "auto", "VALIDATED": "auto"}.get(mode)


def generation_settings(config: Any) -> dict[str, Any]:
    """Chat sampling fields for a `generationConfig`."""
    if not isinstance(config, dict):
        return {}
    out: dict[str, Any] = {}
    names = {
        "maxOutputTokens": "max_tokens",
        "temperature": "temperature",
        "topP": "top_p",
        "topK": "top_k",
        "seed": "seed",
        "presencePenalty": "presence_penalty",
        "frequencyPenalty": "frequency_penalty",
    }
    for camel, chat_name in names.items():
        value = get(config, camel)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[chat_name] = value
    stops = [s for s in arr(get(config, "stopSequences"), "stopSequences") if isinstance(s, str)]
    if stops:
        out["stop"] = stops
    count = get(config, "candidateCount")
    if isinstance(count, int) and not isinstance(count, bool) and count > 1:
        out["n"] = count  # every candidate is recorded and becomes its own trace
    if get(config, "responseMimeType") == "application/json":
        schema = json_schema(get(config, "responseJsonSchema") or get(config, "responseSchema"))
        out["response_format"] = (
            {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
            if isinstance(schema, dict)
            else {"type": "json_object"}
        )
    return out


# --------------------------------------------------------------------------- answer


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


def _usage(answer: dict[str, Any]) -> dict[str, int]:
    prompt, completion = usage_of(answer)
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion,
        "totalTokenCount": prompt + completion,
    }


def _candidate(parts: list[dict[str, Any]], index: int, finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": index}
    if finish is not None:
        candidate["finishReason"] = finish
    return candidate


def _finish(choice: dict[str, Any]) -> str:
    return FINISH.get(str(choice.get("finish_reason")), "STOP")


def _response(
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
            finish = _finish(choice) if k == len(pieces) - 1 else None
            chunks.append(_response([_candidate(piece, index, finish)], call, response_id))
    chunks[-1]["usageMetadata"] = _usage(answer)
    return chunks


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
            _candidate(choice_parts(choice), choice.get("index", position), _finish(choice))
            for position, choice in enumerate(answer_choices(answer))
        ]
        return _response(candidates, call, new_id(""), usageMetadata=_usage(answer))

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

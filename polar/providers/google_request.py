"""Google generateContent requests as Chat Completions: turns, parts, tools, schemas, settings."""

from __future__ import annotations

import logging
import re
from typing import Any

from polar.providers.base import arr, bad_request
from polar.providers.canonical import canonical_json

log = logging.getLogger("polar.providers")

__all__ = [
    "chat_messages",
    "generation_settings",
    "get",
    "json_schema",
    "map_tool_choice",
    "map_tools",
]


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

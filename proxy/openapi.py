"""The gateway's OpenAPI schema: request bodies of the provider routes, and the session key.

The routes take the raw `Request` (each provider parses its own body and
answers errors in its own shape), so FastAPI alone would publish them with no
request body. `install_openapi` completes `/openapi.json`: every provider route
gets the JSON body its API takes (the fields the gateway reads; anything else
is allowed, as the real APIs allow), `/models/{target}` documents Google's
`<model>:<method>` form, every call documents the session-key security
schemes, and operation ids are unique. Fuzzers (tests/integration/test_fuzz_gateway.py)
and client generators work from it.
"""

from __future__ import annotations

import warnings
from typing import Any

from fastapi import FastAPI

_ANY: dict[str, Any] = {}
_TEXT_OR_PARTS: dict[str, Any] = {"oneOf": [{"type": "string"}, {"type": "array"}]}
_TOOLS: dict[str, Any] = {"type": "array", "items": {"type": "object"}}

CHAT = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": {"type": "string"},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role"],
                "properties": {
                    "role": {
                        "enum": ["system", "developer", "user", "assistant", "tool", "function"]
                    },
                    "content": {"oneOf": [{"type": "string"}, {"type": "array"}, {"type": "null"}]},
                    "tool_calls": {"type": "array"},
                    "tool_call_id": {"type": "string"},
                },
            },
        },
        "tools": _TOOLS,
        "tool_choice": _ANY,
        "stream": {"type": "boolean"},
        "max_tokens": {"type": "integer", "minimum": 1},
        "temperature": {"type": "number"},
    },
}
RESPONSES = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "model": {"type": "string"},
        "input": _TEXT_OR_PARTS,
        "instructions": {"type": "string"},
        "tools": _TOOLS,
        "tool_choice": _ANY,
        "stream": {"type": "boolean"},
        "max_output_tokens": {"type": "integer", "minimum": 1},
    },
}
MESSAGES = {
    "type": "object",
    "required": ["max_tokens", "messages"],
    "properties": {
        "model": {"type": "string"},
        "max_tokens": {"type": "integer", "minimum": 1},
        "system": _TEXT_OR_PARTS,
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role", "content"],
                "properties": {"role": {"enum": ["user", "assistant"]}, "content": _TEXT_OR_PARTS},
            },
        },
        "tools": _TOOLS,
        "tool_choice": {"type": "object"},
        "stream": {"type": "boolean"},
    },
}
COUNT_MESSAGES = MESSAGES | {"required": ["messages"]}  # count_tokens takes no max_tokens
GENERATE = {
    "type": "object",
    "required": ["contents"],
    "properties": {
        "contents": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "role": {"enum": ["user", "model"]},
                    "parts": {"type": "array", "items": {"type": "object"}},
                },
            },
        },
        "systemInstruction": {"type": "object"},
        "tools": _TOOLS,
        "toolConfig": {"type": "object"},
        "generationConfig": {"type": "object"},
    },
}
BODIES = {
    "/chat/completions": CHAT,
    "/responses": RESPONSES,
    "/responses/input_tokens": RESPONSES,
    "/messages": MESSAGES,
    "/messages/count_tokens": COUNT_MESSAGES,
    "/models/{target}": GENERATE,
}
TARGET = {
    "type": "string",
    "pattern": r"^[A-Za-z0-9._-]{1,40}:(generateContent|streamGenerateContent|countTokens)$",
    "description": "<model>:<method>, e.g. policy:generateContent",
}
SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "a Polar session key"},
    "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key"},
    "x-goog-api-key": {"type": "apiKey", "in": "header", "name": "x-goog-api-key"},
    "polar-session-key": {"type": "apiKey", "in": "header", "name": "X-Polar-Session-Key"},
    "key": {"type": "apiKey", "in": "query", "name": "key"},
}


def _route_body(path: str) -> dict[str, Any] | None:
    for suffix, schema in BODIES.items():
        if path.endswith(suffix) and (suffix != "/responses" or not path.endswith("_tokens")):
            return schema
    return None


def complete_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (FastAPI's) with provider request bodies, security and unique operation ids."""
    schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    for path, operations in schema.get("paths", {}).items():
        for method, op in operations.items():
            op["operationId"] = (
                f"{method}_{path}".replace("/", "_").replace("{", "").replace("}", "")
            )
            body = _route_body(path) if method == "post" else None
            if body is None:
                continue
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": body}},
            }
            op["security"] = [{name: []} for name in SECURITY_SCHEMES]
            for param in op.get("parameters", []):
                if param.get("name") == "target":
                    param["schema"] = TARGET
    return schema


def install_openapi(app: FastAPI) -> None:
    """Make `app.openapi()` (and `/openapi.json`) the completed schema."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            with warnings.catch_warnings():  # FastAPI's duplicate-id warnings: ids are redone
                warnings.simplefilter("ignore", UserWarning)
                app.openapi_schema = complete_schema(plain())
        return app.openapi_schema

    # FastAPI documents replacing app.openapi; mypy forbids assigning to any method
    app.openapi = openapi  # type: ignore[method-assign]

"""OpenAI Responses requests as Chat Completions: tools (namespaced, custom, hosted), input."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from polar.providers.base import arr, bad_request, dict_at, str_at
from polar.providers.canonical import canonical_arguments, canonical_json

log = logging.getLogger("polar.providers")

__all__ = ["NAMESPACE_SEP", "ToolMap", "input_messages", "map_tool_choice", "map_tools"]

NAMESPACE_SEP = "__"

TEXT_PARTS = ("input_text", "output_text", "text")


@dataclass
class ToolMap:
    """The Chat tools serving a request's tools, and how to name calls back."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)  # flat -> (ns, name)
    custom: set[str] = field(default_factory=set)  # flat names of freeform tools
    dropped: list[str] = field(default_factory=list)


def _function(name: str, description: Any, parameters: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if isinstance(description, str) and description:
        function["description"] = description
    function["parameters"] = (
        parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    )
    return {"type": "function", "function": function}


def _custom_function(name: str, tool: dict[str, Any]) -> dict[str, Any]:
    description = str_at(tool, "description")
    fmt = dict_at(tool, "format")
    if fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        description += f"\n\nInput grammar ({fmt.get('syntax') or 'grammar'}):\n{fmt['definition']}"
    parameters = {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "the raw tool input"}},
        "required": ["input"],
    }
    return _function(name, description.strip(), parameters)


def map_tools(tools: Any, *, note: bool = True) -> ToolMap:
    """Chat tools for Responses `tools`; hosted tools dropped (listed in `dropped`, logged)."""
    out = ToolMap()
    if tools is None:
        return out
    if not isinstance(tools, list):
        raise bad_request("'tools' must be an array", param="tools")

    def add(tool: dict[str, Any], namespace: str | None) -> None:
        kind, name = tool.get("type"), tool.get("name")
        if kind not in ("function", "custom") or not isinstance(name, str) or not name:
            out.dropped.append(str(name or kind))
            return
        flat = f"{namespace}{NAMESPACE_SEP}{name}" if namespace else name
        if kind == "function":
            out.tools.append(_function(flat, tool.get("description"), tool.get("parameters")))
        else:
            out.tools.append(_custom_function(flat, tool))
            out.custom.add(flat)
        if namespace:
            out.namespaced[flat] = (namespace, name)

    for tool in tools:
        if not isinstance(tool, dict):
            raise bad_request("each tool must be an object", param="tools")
        if tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
            for inner in arr(tool.get("tools"), "tools[].tools"):
                if isinstance(inner, dict):
                    add(inner, tool["name"])
        elif tool.get("type") in ("function", "custom"):
            add(tool, None)
        else:
            out.dropped.append(str(tool.get("type")))
    if out.dropped and note:
        log.info("responses: dropped tools the upstream cannot serve: %s", out.dropped)
    return out


def map_tool_choice(choice: Any, tools: ToolMap) -> Any:
    """Chat `tool_choice` for a Responses one (None: unset); forcing a hosted tool is a 400."""
    if isinstance(choice, dict) and choice.get("type") not in (
        "function",
        "custom",
        "allowed_tools",
    ):
        raise bad_request(
            f"tool_choice forces the hosted tool {choice.get('type')!r}, "
            "which this gateway cannot serve",
            param="tool_choice",
            code="unsupported_tool",
        )
    if choice is None or not tools.tools:
        return None
    if choice in ("auto", "none", "required"):
        return choice
    if not isinstance(choice, dict):
        raise bad_request(f"unsupported tool_choice {choice!r}", param="tool_choice")
    if choice.get("type") == "allowed_tools":
        return "required" if choice.get("mode") == "required" else "auto"
    if not isinstance(choice.get("name"), str):
        raise bad_request("tool_choice needs the tool's 'name'", param="tool_choice")
    return {"type": "function", "function": {"name": choice["name"]}}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict):
            if part.get("type") in TEXT_PARTS and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                texts.append(part["refusal"])
    return "\n".join(texts)


def _parts(content: Any, where: str) -> Any:
    """Chat content for Responses input content (string, or text and image parts)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where}.content must be a string or an array", param=where)
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            image = {"url": part["image_url"]}
            if part.get("detail"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise bad_request(
                f"{where}: content part {kind!r} is not supported by this gateway",
                param=where,
                code="unsupported_content",
            )
    return parts


def _reasoning_text(item: dict[str, Any], where: str) -> str:
    """The reasoning text of a reasoning item: its content, else its summary."""
    for key in ("content", "summary"):
        parts = arr(item.get(key), f"{where}.{key}")
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if texts:
            return "".join(texts)
    return ""


class _Conversation:
    """Chat messages built item by item; one assistant turn gathers consecutive items."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.turn: dict[str, Any] | None = None

    def close(self) -> None:
        if self.turn is not None:
            self.messages.append(self.turn)
            self.turn = None

    def add(self, message: dict[str, Any]) -> None:
        self.close()
        self.messages.append(message)

    def assistant(self, *, starts_with: str) -> dict[str, Any]:
        """The open assistant turn, or a new one if `starts_with` cannot join it."""
        turn = self.turn
        if turn is not None:
            blocked_by = (
                ("content", "tool_calls")
                if starts_with == "reasoning"
                else (("tool_calls",) if starts_with == "text" else ())
            )
            if any(turn.get(key) for key in blocked_by):
                self.close()
        if self.turn is None:
            self.turn = {"role": "assistant", "content": None}
        return self.turn


def _tool_call(call_id: Any, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": canonical_arguments(arguments)},
    }


def input_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Chat messages for a request's `instructions` and `input`."""
    conv = _Conversation()
    instructions = request.get("instructions")
    if isinstance(instructions, str) and instructions:
        conv.add({"role": "system", "content": instructions})
    items = request.get("input")
    if isinstance(items, str):
        conv.add({"role": "user", "content": items})
        return conv.messages
    if not isinstance(items, list):
        raise bad_request(
            "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
        )
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object", param=where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role == "assistant":
                turn = conv.assistant(starts_with="text")
                text = _text_of(item.get("content"))
                turn["content"] = f"{turn['content']}\n{text}" if turn["content"] else text
            elif role in ("user", "system", "developer"):
                chat_role = "user" if role == "user" else "system"
                conv.add({"role": chat_role, "content": _parts(item.get("content"), where)})
            else:
                raise bad_request(f"{where}: unknown role {role!r}", param=where)
        elif kind == "reasoning":
            text = _reasoning_text(item, where)
            if text:
                turn = conv.assistant(starts_with="reasoning")
                turn["reasoning_content"] = (turn.get("reasoning_content") or "") + text
        elif kind in ("function_call", "custom_tool_call"):
            name = item.get("name")
            if not isinstance(name, str):
                raise bad_request(f"{where}.name must be a string", param=where)
            if isinstance(item.get("namespace"), str) and item["namespace"]:
                name = f"{item['namespace']}{NAMESPACE_SEP}{name}"
            arguments = (
                item.get("arguments")
                if kind == "function_call"
                else canonical_json({"input": item.get("input") or ""})
            )
            turn = conv.assistant(starts_with="call")
            turn.setdefault("tool_calls", []).append(
                _tool_call(item.get("call_id"), name, arguments)
            )
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            content = (
                _parts(output, where)
                if isinstance(output, list)
                else (output if isinstance(output, str) else canonical_json(output))
            )
            conv.add({"role": "tool", "tool_call_id": item.get("call_id"), "content": content})
        else:
            raise bad_request(
                f"{where}: input item type {kind!r} is not supported by this gateway",
                param=where,
                code="unsupported_input_item",
            )
    conv.close()
    return conv.messages

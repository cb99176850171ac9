"""A small multi-turn agent for the demo: it talks to the model through Polar's gateway.

It uses the official `openai` SDK with the base URL and key the harness
environment provides (OPENAI_BASE_URL / OPENAI_API_KEY), offers one tool,
runs a few turns (feeding tool results back when the model calls the tool),
and writes the model's last answer to answer.txt.
"""

import json
import os
import sys
import time

from openai import OpenAI

TURNS = int(os.environ.get("DEMO_TURNS", "3"))
STREAM_TURNS = {int(t) for t in os.environ.get("DEMO_STREAM_TURNS", "1").split(",") if t}
PAUSE_S = float(os.environ.get("DEMO_PAUSE_S", "0"))
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write text to a file in the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                "required": ["path", "text"],
            },
        },
    }
]


def main() -> int:
    client = OpenAI(max_retries=5, timeout=120)
    model = os.environ.get("OPENAI_MODEL", "policy")
    instruction = os.environ.get("POLAR_INSTRUCTION") or "Write a haiku to answer.txt."
    messages = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": instruction},
    ]
    answer = ""
    for turn in range(TURNS):
        request = dict(model=model, messages=messages, tools=TOOLS, max_tokens=32, temperature=1.0)
        if turn in STREAM_TURNS:
            content, tool_calls = stream_turn(client, request)
        else:
            message = client.chat.completions.create(**request).choices[0].message
            content = message.content or ""
            tool_calls = [c.model_dump() for c in message.tool_calls or []]
        assistant = {"role": "assistant", "content": content}
        if tool_calls:
            assistant["tool_calls"] = tool_calls
        messages.append(assistant)
        for call in tool_calls:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
        answer = content or answer
        if not tool_calls:
            messages.append({"role": "user", "content": f"Turn {turn + 1} done. Continue."})
        time.sleep(PAUSE_S)
    with open("answer.txt", "w") as fh:
        fh.write(answer or "(empty)")
    print(json.dumps({"turns": TURNS, "answer_chars": len(answer)}))
    return 0


def stream_turn(client: OpenAI, request: dict) -> tuple[str, list[dict]]:
    """One streamed call: the text and tool calls put back together from the deltas."""
    content, calls = "", {}
    for chunk in client.chat.completions.create(stream=True, **request):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for part in delta.tool_calls or []:
            call = calls.setdefault(
                part.index,
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            call["id"] = part.id or call["id"]
            if part.function:
                call["function"]["name"] += part.function.name or ""
                call["function"]["arguments"] += part.function.arguments or ""
    return content, [calls[i] for i in sorted(calls)]


if __name__ == "__main__":
    sys.exit(main())

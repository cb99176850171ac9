"""A small multi-turn agent for the demo: it talks to the model through Polar's gateway.

It uses the official `openai` SDK with the base URL and key the harness
environment provides (OPENAI_BASE_URL / OPENAI_API_KEY), offers one tool,
runs a few turns (feeding tool results back when the model calls the tool),
and writes the model's last answer to answer.txt.
"""

import json
import os
import sys

from openai import OpenAI

TURNS = int(os.environ.get("DEMO_TURNS", "3"))
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
        reply = client.chat.completions.create(
            model=model, messages=messages, tools=TOOLS, max_tokens=32, temperature=1.0
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok"})
        answer = message.content or answer
        if not message.tool_calls:
            messages.append({"role": "user", "content": f"Turn {turn + 1} done. Continue."})
    with open("answer.txt", "w") as fh:
        fh.write(answer or "(empty)")
    print(json.dumps({"turns": TURNS, "answer_chars": len(answer)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

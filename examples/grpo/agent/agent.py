"""The GRPO example's agent: a few chat turns through Polar's gateway, every reply kept.

It uses the official `openai` SDK with the base URL and key the harness
environment provides (OPENAI_BASE_URL / OPENAI_API_KEY). Each turn sends the
conversation so far (the previous replies included, so turn 2 is conditioned on
what the policy said in turn 1), and answer.txt gets every reply, one per line:
the evaluator grades all the tokens the policy sampled.
"""

import json
import os
import sys

from openai import OpenAI

TURNS = int(os.environ.get("GRPO_TURNS", "2"))
MAX_TOKENS = int(os.environ.get("GRPO_MAX_TOKENS", "16"))
FOLLOW_UP = "Another one."


def main() -> int:
    client = OpenAI(max_retries=5, timeout=120)
    model = os.environ.get("OPENAI_MODEL", "policy")
    instruction = os.environ.get("POLAR_INSTRUCTION") or "Write a number."
    messages = [{"role": "user", "content": instruction}]
    replies: list[str] = []
    for _ in range(TURNS):
        reply = client.chat.completions.create(
            model=model, messages=messages, max_tokens=MAX_TOKENS, temperature=1.0
        )
        text = reply.choices[0].message.content or ""
        replies.append(text.replace("\n", " "))
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": FOLLOW_UP}]
    with open("answer.txt", "w") as fh:
        fh.write("\n".join(replies))
    print(json.dumps({"turns": TURNS, "answer_chars": sum(map(len, replies))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

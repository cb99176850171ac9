"""A minimal multi-turn agent for the fault tests: the openai SDK with retries, through the gateway.

Each answered call's response id is appended to $FAULT_LOG (one JSON line with
the session id), so a test can compare what the harness saw answered with
what the gateway recorded in S3.
"""

import json
import os
import sys
import time

from openai import OpenAI


def main() -> int:
    client = OpenAI(max_retries=int(os.environ.get("FAULT_RETRIES", "8")), timeout=60)
    turns = int(os.environ.get("FAULT_TURNS", "4"))
    pause = float(os.environ.get("FAULT_PAUSE_S", "0"))
    log = os.environ.get("FAULT_LOG")
    messages = [{"role": "user", "content": os.environ.get("POLAR_INSTRUCTION", "hi")}]
    answer = ""
    for turn in range(turns):
        reply = client.chat.completions.create(
            model=os.environ.get("OPENAI_MODEL", "policy"), messages=messages, max_tokens=16
        )
        answer = reply.choices[0].message.content or answer
        if log:
            with open(log, "a") as fh:
                line = {
                    "session_id": os.environ.get("POLAR_SESSION_ID"),
                    "turn": turn,
                    "id": reply.id,
                    "t": time.time(),
                }
                fh.write(json.dumps(line) + "\n")
        messages += [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": f"turn {turn + 1} done, continue"},
        ]
        time.sleep(pause)
    with open("answer.txt", "w") as fh:
        fh.write(answer or "(empty)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The model backend of the compose stack's test: bench's fake vLLM (bench/fake_vllm.py) as a
service of the stack, run in the service image with the repository's `bench/` mounted.

    python compose_model.py --port 8000     (PYTHONPATH holds the folder above bench/)

`POST /v1/chat/completions` answers "answer {n}" in vLLM's shape with fixed token ids;
`GET /health` and `GET /v1/models` answer as vLLM does.
"""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

import uvicorn

from bench.fake_vllm import json_asgi_app, vllm_answer

MODEL = "policy"
calls = itertools.count(1)


async def route(method: str, path: str, query: str, body: bytes) -> tuple[int, Any] | None:
    """The few routes of vLLM's OpenAI server that a gateway uses."""
    if method == "GET" and path == "/health":
        return 200, {}
    if method == "GET" and path == "/v1/models":
        return 200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
    if method == "POST" and path == "/v1/chat/completions":
        n = next(calls)
        answer = vllm_answer(
            json.loads(body),
            n,
            prompt_ids=[11, 12, 13],
            response_ids=[21, 22],
            text=f"answer {n}",
            model=MODEL,
        )
        return 200, answer
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(json_asgi_app(route), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

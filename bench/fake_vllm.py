"""The benchmarks' fake vLLM: a raw ASGI JSON app (no framework, so it costs the shared
cores little) and vLLM's chat.completion shape with fixed token ids."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

Route = Callable[[str, str, str, bytes], Awaitable[tuple[int, Any] | None]]
"""(method, path, query string, body) → (status, JSON payload), or None for a 404."""


def vllm_answer(
    body: dict[str, Any],
    n: int,
    *,
    prompt_ids: list[int],
    response_ids: list[int],
    text: str = "ok",
    model: str = "policy",
) -> dict[str, Any]:
    """A vLLM-shaped chat.completion; token ids and logprobs only when the request asks."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": text,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [],
            "reasoning_content": None,
        },
        "logprobs": None,
        "finish_reason": "stop",
        "stop_reason": None,
    }
    if body.get("logprobs"):
        choice["logprobs"] = {
            "content": [
                {
                    "token": f"token_id:{t}",
                    "logprob": -0.01 * (i + 1),
                    "bytes": [],
                    "top_logprobs": [],
                }
                for i, t in enumerate(response_ids)
            ]
        }
    answer: dict[str, Any] = {
        "id": f"chatcmpl-{n:016x}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "total_tokens": len(prompt_ids) + len(response_ids),
            "completion_tokens": len(response_ids),
            "prompt_tokens_details": None,
        },
        "prompt_logprobs": None,
        "kv_transfer_params": None,
    }
    if body.get("return_token_ids"):
        answer["prompt_token_ids"] = prompt_ids
        choice["token_ids"] = response_ids
    return answer


async def read_body(receive: Any) -> bytes:
    """The whole body of an ASGI HTTP request."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def json_asgi_app(
    route: Route, on_startup: Callable[[], None] | None = None
) -> Callable[..., Awaitable[None]]:
    """An ASGI app answering every HTTP request with the JSON that `route` returns."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    if on_startup is not None:
                        on_startup()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = await read_body(receive)
        path = scope["path"]
        query = scope["query_string"].decode()
        answered = await route(scope["method"], path, query, body)
        status, payload = answered or (404, {"error": {"message": f"no route {path}", "code": 404}})
        data = json.dumps(payload).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    return app

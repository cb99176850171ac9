"""A scripted stand-in for vLLM: answers Chat Completions in vLLM's exact shape.

Tests give it a queue of replies (text, tool calls, errors, delays); it
answers `POST /v1/chat/completions` with the next one and keeps every body it
received. Token ids are derived from bytes (prompt: a ChatML-like rendering
of the messages; response: the generated text plus an end-of-turn id), and
logprobs are a deterministic function of position and id, so tests can
assert the gateway recorded exactly what the backend produced. Like vLLM, it
returns `prompt_token_ids` / `choices[0].token_ids` only when asked
(`return_token_ids`) and `logprobs` only when asked (`logprobs`). A request
with `n > 1` is answered with `n` choices, one scripted reply each.

    with scripted_backend([text("hi"), tool_call("shell", {"cmd": "ls"})]) as backend:
        ... backend.url, backend.requests, backend.responses
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.support.ports import free_port

from .polling import wait_until

END_OF_TURN = 256  # one past the byte range: the id that ends a turn


@dataclass
class ScriptedReply:
    """One scripted answer. `tool_calls`: [(name, arguments dict or JSON string)]."""

    text: str | None = None
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    reasoning: str | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None  # vLLM's matched stop string / token id
    status_code: int = 200
    error: str | None = None
    delay_s: float = 0.0
    omit_token_ids: bool = False


def text(content: str, **kw: Any) -> ScriptedReply:
    return ScriptedReply(text=content, **kw)


def tool_call(name: str, arguments: dict[str, Any] | str, **kw: Any) -> ScriptedReply:
    return ScriptedReply(tool_calls=[(name, arguments)], **kw)


def error(status_code: int, message: str) -> ScriptedReply:
    return ScriptedReply(status_code=status_code, error=message)


def prompt_ids(messages: list[dict[str, Any]]) -> list[int]:
    """Byte ids of a ChatML-like rendering of `messages` plus the generation prompt."""
    rendered = "".join(
        f"<|im_start|>{m.get('role')}\n{json.dumps(m.get('content'))}"
        f"{json.dumps(m.get('tool_calls')) if m.get('tool_calls') else ''}<|im_end|>\n"
        for m in messages
    )
    return list((rendered + "<|im_start|>assistant\n").encode())


def logprob_of(position: int, token_id: int) -> float:
    """A deterministic, distinct-looking logprob for a sampled token."""
    return -round(0.001 * (1 + (token_id * 31 + position * 7) % 997), 6)


@dataclass
class ScriptedBackend:
    """Handle of a running scripted backend: its base URL, what it got and what it answered."""

    url: str
    replies: deque[ScriptedReply]
    requests: list[dict[str, Any]] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)

    def push(self, *replies: ScriptedReply) -> None:
        self.replies.extend(replies)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        """Status, JSON body and delay of the answer to `body` (the next scripted reply)."""
        self.requests.append(body)
        if not self.replies:
            return (
                500,
                {
                    "error": {
                        "message": "scripted backend: no reply left",
                        "type": "InternalServerError",
                        "param": None,
                        "code": 500,
                    }
                },
                0.0,
            )
        reply = self.replies.popleft()
        if reply.error is not None:
            err = {
                "message": reply.error,
                "type": "BadRequestError",
                "param": None,
                "code": reply.status_code,
            }
            return reply.status_code, {"error": err}, reply.delay_s
        answer = render_answer(body, reply)
        n = body.get("n")
        if type(n) is int and n > 1:  # each further choice is the next scripted reply
            more = [self.replies.popleft() for _ in range(min(n - 1, len(self.replies)))]
            answer = merge_choices([answer] + [render_answer(body, r) for r in more])
        self.responses.append(answer)
        return 200, answer, reply.delay_s


def render_answer(body: dict[str, Any], reply: ScriptedReply) -> dict[str, Any]:
    """A vLLM-shaped chat.completion answering `body` with `reply`."""
    calls = [
        {
            "id": f"chatcmpl-tool-{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {
                "name": name,
                "arguments": args if isinstance(args, str) else json.dumps(args),
            },
        }
        for name, args in reply.tool_calls
    ]
    generated = (f"<think>{reply.reasoning}</think>" if reply.reasoning else "") + (
        reply.text or ""
    )
    for c in calls:
        payload = {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        generated += f"<tool_call>{json.dumps(payload)}</tool_call>"
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    out_ids = list(generated.encode()) + ([END_OF_TURN] if finish != "length" else [])
    in_ids = prompt_ids(body.get("messages") or [])
    content = reply.text if reply.text is not None else (None if calls else "")
    return vllm_chat_answer(
        body,
        content=content,
        tool_calls=calls,
        reasoning=reply.reasoning,
        finish=finish,
        stop_reason=reply.stop_reason,
        in_ids=in_ids,
        out_ids=out_ids,
        token_texts=[f"token_id:{tid}" for tid in out_ids],
        token_bytes=[[tid] if tid < 256 else [] for tid in out_ids],
        with_ids=not reply.omit_token_ids,
        answer_id=f"chatcmpl-{uuid.uuid4().hex}",
    )


def merge_choices(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """One answer of several choices (`n > 1`), as vLLM gives it: choice `i` is `answers[i]`'s."""
    merged = answers[0] | {"choices": []}
    for i, answer in enumerate(answers):
        merged["choices"].append(answer["choices"][0] | {"index": i})
    completion = sum(a["usage"]["completion_tokens"] for a in answers)
    prompt = merged["usage"]["prompt_tokens"]
    merged["usage"] = merged["usage"] | {
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return merged


def vllm_chat_answer(
    body: dict[str, Any],
    *,
    content: str | None,
    tool_calls: list[dict[str, Any]],
    finish: str,
    in_ids: list[int],
    out_ids: list[int],
    token_texts: list[str],
    token_bytes: list[list[int]],
    answer_id: str,
    reasoning: str | None = None,
    stop_reason: str | int | None = None,
    with_ids: bool = True,
    model: str = "policy",
) -> dict[str, Any]:
    """A chat.completion exactly in vLLM's shape; ids and logprobs only when `body` asks."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": tool_calls,
            "reasoning_content": reasoning,
        },
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": stop_reason,
    }
    if body.get("logprobs"):
        choice["logprobs"] = {
            "content": [
                {"token": text, "logprob": logprob_of(i, tid), "bytes": raw, "top_logprobs": []}
                for i, (tid, text, raw) in enumerate(
                    zip(out_ids, token_texts, token_bytes, strict=True)
                )
            ]
        }
    wants_ids = bool(body.get("return_token_ids")) and with_ids
    if wants_ids:
        choice["token_ids"] = out_ids
    return {
        "id": answer_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {
            "prompt_tokens": len(in_ids),
            "total_tokens": len(in_ids) + len(out_ids),
            "completion_tokens": len(out_ids),
            "prompt_tokens_details": None,
        },
        "prompt_logprobs": None,
        "prompt_token_ids": in_ids if wants_ids else None,
        "kv_transfer_params": None,
    }


def backend_app(handle: ScriptedBackend) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        status, answer, delay_s = handle.answer(await request.json())
        if delay_s:
            await asyncio.sleep(delay_s)
        return JSONResponse(answer, status_code=status)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


@contextmanager
def serve_app(app: Any, port: int | None = None) -> Iterator[str]:
    """Serve an ASGI app with uvicorn in a daemon thread on loopback; yields its base URL."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True, name=f"uvicorn-{port}")
    thread.start()

    def started() -> bool:
        assert thread.is_alive(), f"uvicorn on port {port} exited"
        return bool(server.started)

    wait_until(started, 10, f"uvicorn on port {port}", every_s=0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def scripted_backend(replies: list[ScriptedReply] | None = None) -> Iterator[ScriptedBackend]:
    """Run a scripted vLLM-shaped backend; the handle's `.url` is its `/v1` base."""
    handle = ScriptedBackend(url="", replies=deque(replies or []))
    with serve_app(backend_app(handle)) as base:
        handle.url = f"{base}/v1"
        yield handle

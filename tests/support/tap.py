"""A recording tap between the gateway and the real vLLM.

It forwards every request unchanged and keeps the raw (request, answer) pairs,
so tests can check traces against what the backend actually sampled,
independently of the gateway's own records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response


@dataclass
class Exchange:
    path: str
    request: dict[str, Any]
    status_code: int
    response: dict[str, Any] | None


@dataclass
class Tap:
    upstream: str
    url: str = ""
    exchanges: list[Exchange] = field(default_factory=list)

    def sampled(self) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]]:
        """(prompt ids, sampled ids, logprobs) of every successful chat completion."""
        out = []
        for ex in self.exchanges:
            if ex.response is None or ex.status_code != 200 or "choices" not in ex.response:
                continue
            choice = ex.response["choices"][0]
            logprobs = tuple(item["logprob"] for item in choice["logprobs"]["content"])
            out.append(
                (tuple(ex.response["prompt_token_ids"]), tuple(choice["token_ids"]), logprobs)
            )
        return out


def tap_app(tap: Tap) -> FastAPI:
    app = FastAPI()
    client = httpx.AsyncClient(timeout=300)

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def forward(path: str, request: Request) -> Response:
        body = await request.body()
        upstream = await client.request(
            request.method,
            f"{tap.upstream.rstrip('/')}/{path.removeprefix('v1/')}",
            content=body,
            headers={"content-type": request.headers.get("content-type", "application/json")},
        )
        if request.method == "POST":
            try:
                answer = upstream.json()
            except ValueError:
                answer = None
            tap.exchanges.append(Exchange(path, _json(body), upstream.status_code, answer))
        return Response(
            upstream.content,
            status_code=upstream.status_code,
            media_type=upstream.headers.get("content-type"),
        )

    return app


def _json(body: bytes) -> dict[str, Any]:
    import json

    try:
        return json.loads(body)
    except ValueError:
        return {}

"""An upstream's HTTP answer read: its JSON body, or the `UpstreamError` it amounts to
(a context overflow recognised in the backend's words)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from polar import fastjson
from polar.providers import CONTEXT_CODE, APIError, ContextOverflow

__all__ = ["UpstreamAnswer", "UpstreamError", "context_overflow", "read_answer"]


class UpstreamError(APIError):
    """An upstream call that gave no usable answer, in the caller's error shape."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        code: str | None = None,
        type: str | None = None,
        url: str | None = None,
        upstream_status: int | None = None,
        upstream_body: dict[str, Any] | None = None,
        overflow: ContextOverflow | None = None,
    ) -> None:
        super().__init__(status_code, message, code=code, type=type, overflow=overflow)
        self.url = url
        self.upstream_status = upstream_status
        self.upstream_body = upstream_body


@dataclass
class UpstreamAnswer:
    """A successful upstream answer: parsed JSON body, status and the base URL that served it."""

    body: dict[str, Any]
    status_code: int
    url: str


def _error_message(status: int, reason: str, content: bytes) -> tuple[str, dict[str, Any] | None]:
    """The message of an upstream error body (OpenAI, old-vLLM or FastAPI shape) and the body."""
    try:
        data = fastjson.loads(content)
    except ValueError:
        text = content.decode("utf-8", "replace").strip()
        return (text[:2000] or reason or "upstream error"), None
    if not isinstance(data, dict):
        return json.dumps(data)[:2000], None
    err = data.get("error")
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"]), data
    for value in (err, data.get("message"), data.get("detail")):
        if value:
            return (value if isinstance(value, str) else json.dumps(value))[:2000], data
    return json.dumps(data)[:2000], data


_LIMIT = re.compile(
    r"maximum context length (?:is|of) (\d+)|context length \((\d+) tokens\)", re.IGNORECASE
)

_PROMPT = re.compile(  # the first of these in the message: the tokens past the window
    r"contains (?:at least )?(\d+) input tokens"  # vLLM 0.1x+
    r"|requested (?:a total of )?(\d+) tokens"  # older vLLM and SGLang: prompt + completion
    r"|messages resulted in (\d+) tokens"  # OpenAI
    r"|input \((\d+) tokens\)",  # SGLang: "The input (P tokens) is longer than ..."
    re.IGNORECASE,
)


def context_overflow(message: str) -> ContextOverflow | None:
    """The context overflow a backend's 400 message reports (vLLM: "This model's maximum
    context length is N tokens. However, your prompt contains P input tokens ..."; SGLang:
    "The input (P tokens) is longer than the model's context length (N tokens)."), if any."""
    limit = _LIMIT.search(message)
    if limit is None:
        return None
    prompt = _PROMPT.search(message)
    prompt_tokens = next((int(g) for g in prompt.groups() if g), None) if prompt else None
    return ContextOverflow(int(limit[1] or limit[2]), prompt_tokens)


def read_answer(base: str, status: int, reason: str, content: bytes) -> UpstreamAnswer:
    """The answer `base` gave (`status`, `reason`, `content`), or the UpstreamError it is:
    502 for the backend's fault or the gateway's configuration, the caller's own 4xx
    otherwise (400 `context_length_exceeded` for a context overflow)."""
    if status >= 400:
        message, data = _error_message(status, reason, content)
        if status >= 500 or status in (401, 403):
            # the backend's fault or the gateway's configuration, not the caller's request
            raise UpstreamError(
                502,
                f"upstream {base} answered {status}: {message}",
                code="upstream_error",
                url=base,
                upstream_status=status,
                upstream_body=data,
            )
        overflow = context_overflow(message) if status in (400, 413, 422) else None
        raise UpstreamError(
            400 if overflow else status,
            message,
            url=base,
            upstream_status=status,
            upstream_body=data,
            code=CONTEXT_CODE if overflow else _upstream_code(data),
            overflow=overflow,
        )
    try:
        body = fastjson.loads(content)
    except ValueError as exc:
        raise UpstreamError(
            502,
            f"upstream {base} answered {status} with a body that is not JSON",
            code="upstream_error",
            url=base,
            upstream_status=status,
        ) from exc
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        raise UpstreamError(
            502,
            f"upstream {base} answered {status} without 'choices'",
            code="upstream_error",
            url=base,
            upstream_status=status,
            upstream_body=body if isinstance(body, dict) else None,
        )
    return UpstreamAnswer(body=body, status_code=status, url=base)


def _upstream_code(data: dict[str, Any] | None) -> str | None:
    err = (data or {}).get("error")
    code = err.get("code") if isinstance(err, dict) else None
    return code if isinstance(code, str) else None

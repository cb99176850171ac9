"""The shared interface of the provider APIs the gateway speaks, and its small helpers.

Every provider (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages,
Google generateContent) is a `ProviderAPI`: it recognises its calls, turns a
request into a Chat Completions body (the one shape the upstream speaks),
renders the upstream's Chat Completions answer back in its own shape (whole
or as the synthetic SSE stream its official SDK expects), and renders errors
in its own error shape. All of it is pure: no I/O, no clock other than ids.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("polar.providers")
P = ParamSpec("P")
R = TypeVar("R")

PIECES = 4
REASONING_KEYS = ("reasoning_content", "reasoning")


CONTEXT_CODE = "context_length_exceeded"


@dataclass(frozen=True)
class ContextOverflow:
    """A prompt longer than the model's context window, as the backend reported it."""

    limit: int
    """the context window, in tokens"""
    prompt_tokens: int | None = None
    """the tokens the call needed (its prompt, or prompt and completion where the backend
    counted both), where the backend said; else at least `limit + 1`"""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens if self.prompt_tokens is not None else self.limit + 1


class APIError(Exception):
    """A failure the caller gets as an error body in its own provider's shape.

    `type` is OpenAI's error type when one is meant explicitly (else derived
    from the status); `code` a short machine-readable reason. `overflow`: the
    prompt outgrew the context window; each API renders that in its own dialect
    (`ProviderAPI.overflow_error`), the one its clients act on (compact, or stop).
    """

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        overflow: ContextOverflow | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.overflow = overflow


@dataclass(frozen=True)
class CallContext:
    """What a provider may need of the HTTP call besides its body."""

    path: str = "/"
    headers: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    model: str | None = None  # from the path, where the API puts it there (Google)
    action: str | None = None  # e.g. "generateContent", "streamGenerateContent"

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        for key, value in self.headers.items():
            if key.lower() == lowered:
                return value
        return None


class ProviderAPI(ABC):
    """One provider API: detect, normalise to Chat Completions, render back, render errors."""

    name: str = ""

    @abstractmethod
    def detect(self, path: str, headers: Mapping[str, str]) -> bool:
        """Whether a call to `path` with `headers` speaks this API."""

    @abstractmethod
    def to_chat(self, request: dict[str, Any], call: CallContext) -> dict[str, Any]:
        """The Chat Completions body serving `request`; raise a 4xx APIError if it cannot be."""

    @abstractmethod
    def from_chat(
        self, answer: dict[str, Any], request: dict[str, Any], call: CallContext
    ) -> dict[str, Any]:
        """The caller's answer rendered from the Chat Completions `answer` to its `request`."""

    @abstractmethod
    def stream_events(
        self, answer: dict[str, Any], request: dict[str, Any], call: CallContext
    ) -> Iterator[str]:
        """The synthetic stream (SSE text) replaying `answer` as the caller's SDK expects."""

    @abstractmethod
    def error_body(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
    ) -> dict[str, Any]:
        """An error body in this API's shape."""

    def error(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body) of an error in this API's shape."""
        return status, self.error_body(status, message, code=code, param=param, type=type)

    def render_error(self, exc: APIError) -> tuple[int, dict[str, Any]]:
        if exc.overflow is not None:
            return self.overflow_error(exc.overflow)
        return self.error(
            exc.status_code, exc.message, code=exc.code, param=exc.param, type=exc.type
        )

    def overflow_error(self, overflow: ContextOverflow) -> tuple[int, dict[str, Any]]:
        """A context overflow in this API's dialect; OpenAI Chat Completions' by default."""
        message = (
            f"This model's maximum context length is {overflow.limit} tokens. However, your "
            f"messages resulted in {overflow.tokens} tokens. Please reduce the length of the "
            "messages."
        )
        return self.error(
            400, message, code=CONTEXT_CODE, param="messages", type="invalid_request_error"
        )

    def wants_stream(self, request: dict[str, Any], call: CallContext) -> bool:
        """Whether the caller asked for a stream (a body flag for most APIs)."""
        return bool(request.get("stream"))

    def stream_media_type(self, call: CallContext) -> str:
        return "text/event-stream"

    def model_list(self, names: list[str], context_window: int | None = None) -> dict[str, Any]:
        """The answer to a model listing, in this API's shape (with each model's context
        window, where the backend told it)."""
        return {"object": "list", "data": [self.model_card(n, context_window) for n in names]}

    def model_card(self, name: str, context_window: int | None = None) -> dict[str, Any]:
        card: dict[str, Any] = {"id": name, "object": "model", "created": 0, "owned_by": "polar"}
        if context_window is not None:
            # vLLM's and SGLang's key, and the one OpenAI-compatible routers use
            card["max_model_len"] = card["context_length"] = context_window
        return card

    def token_count(self, count: int, approximate: bool) -> dict[str, Any]:
        """The answer to a token-counting call, in this API's shape."""
        out: dict[str, Any] = {"object": "response.input_tokens", "input_tokens": count}
        if approximate:
            out["approximate"] = True
        return out


# --------------------------------------------------------------------------- helpers


def split_text(text: str, pieces: int = PIECES) -> list[str]:
    """`text` in up to `pieces` non-empty consecutive parts."""
    if not text:
        return []
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def sse(data: dict[str, Any] | str, event: str | None = None) -> str:
    """One SSE event: `event:` line if named, compact JSON `data:` line."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n"


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def first_choice(answer: dict[str, Any]) -> dict[str, Any]:
    """The first choice of a Chat Completions answer ({} if there is none)."""
    choices = answer.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


def answer_message(answer: dict[str, Any]) -> dict[str, Any]:
    message = first_choice(answer).get("message")
    return message if isinstance(message, dict) else {}


def dict_at(container: Mapping[str, Any], key: str) -> dict[str, Any]:
    """`container[key]` if it is an object, else {}."""
    value = container.get(key)
    return value if isinstance(value, dict) else {}


def str_at(container: Mapping[str, Any], key: str) -> str:
    """`container[key]` if it is a string, else ""."""
    value = container.get(key)
    return value if isinstance(value, str) else ""


def reasoning_of(message: dict[str, Any]) -> str | None:
    """The reasoning text of an assistant message (`reasoning_content` or `reasoning`)."""
    for key in REASONING_KEYS:
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def usage_of(answer: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of a Chat Completions answer."""
    usage = dict_at(answer, "usage")
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    return (
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """Tool-call arguments as an object; unparsable or non-object text is kept under `_raw`."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {"_raw": arguments}
    return parsed if isinstance(parsed, dict) else {"_raw": arguments}


def approximate_tokens(chat: dict[str, Any]) -> int:
    """A rough token count of a Chat request (about 4 characters a token)."""
    rendered = json.dumps([chat.get("messages"), chat.get("tools")], ensure_ascii=False)
    return max(1, -(-len(rendered) // 4))


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code or "invalid_request")


def require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object", code="invalid_json")
    return body


def obj(value: Any, where: str) -> dict[str, Any]:
    """`value` if it is an object ({} for None); else a 400 naming `where`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"{where} must be an object", param=where)
    return value


def arr(value: Any, where: str) -> list[Any]:
    """`value` if it is an array ([] for None); else a 400 naming `where`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_request(f"{where} must be an array", param=where)
    return value


def malformed_is_400(method: Callable[P, R]) -> Callable[P, R]:
    """Make a request transformer answer a 400 for shapes its checks did not foresee.

    A type error while reading a request is the request's fault (a field of
    the wrong type somewhere deep): the caller gets a 400 in its own shape,
    never a 500, and the log keeps the traceback in case it was ours.
    """

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except (TypeError, AttributeError, LookupError, ValueError) as exc:
            log.warning("malformed request: %s: %s", type(exc).__name__, exc, exc_info=True)
            raise bad_request(
                f"malformed request: a field has an unexpected type or shape ({exc})",
                code="invalid_request",
            ) from exc

    return wrapper

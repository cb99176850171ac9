"""The training fields of an upstream call: asked for (`normalize`), read out of the answer
(`extract`), and taken out of the caller's view (`strip_training_fields`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from polar.records import SampledChoice

__all__ = ["KINDS", "Extracted", "extract", "normalize", "strip_training_fields"]

KINDS = ("vllm", "sglang")
"""The policy's upstream kinds (training fields asked for); a pool may also be `openai`
(proxy/pools.py `POOL_KINDS`)."""


@dataclass
class Extracted:
    """The training data read out of an upstream answer (top-level fields: the first choice)."""

    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    response_logprobs: list[float] | None = None
    finish_reason: str | None = None
    model: str | None = None
    choices: list[SampledChoice] = field(default_factory=list)
    """every choice, when the answer has several (`n > 1`); empty for one"""

    @property
    def sampled_tokens(self) -> int:
        """Sampled ids over every choice."""
        if not self.choices:
            return len(self.response_token_ids or [])
        return sum(len(c.response_token_ids or []) for c in self.choices)

    @property
    def has_token_ids(self) -> bool:
        return self.prompt_token_ids is not None and self.response_token_ids is not None


def normalize(request: dict[str, Any], kind: str, model: str | None) -> dict[str, Any]:
    """The request sent upstream: a copy of the caller's, non-streaming, with training fields.

    Only the top level is copied (the caller's request is left as it was); nested values
    are shared with it and never changed.
    """
    out = dict(request)
    out.pop("stream", None)
    out.pop("stream_options", None)
    if model:
        out["model"] = model
    if kind == "openai":  # a plain OpenAI-compatible API (a pool's): no training fields
        return out
    out["logprobs"] = True
    if kind == "vllm":
        asked = out.get("top_logprobs")
        out["top_logprobs"] = asked if isinstance(asked, int) and asked > 0 else 0
        out["return_token_ids"] = True
    elif kind == "sglang":
        out["return_prompt_token_ids"] = True
        out["return_token_ids"] = True
        out["return_meta_info"] = True
    else:
        raise ValueError(f"unknown upstream kind {kind!r}: use one of {KINDS}")
    return out


def _int_list(value: Any) -> list[int] | None:
    """`value` itself if it is a list of ints (no bools), else None. Not copied: a
    prompt's ids are tens of thousands of ints, and nothing changes the answer's lists."""
    if isinstance(value, list) and set(map(type, value)) <= {int}:
        return value
    return None


def _float_list(values: list[Any]) -> list[float] | None:
    out: list[float] = []
    for v in values:
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            return None
        out.append(float(v))
    return out


def _vllm_logprobs(choice: dict[str, Any]) -> list[float] | None:
    content = (choice.get("logprobs") or {}).get("content")
    if not isinstance(content, list):
        return None
    return _float_list([i.get("logprob") if isinstance(i, dict) else None for i in content])


def _sglang_meta_logprobs(choice: dict[str, Any]) -> list[list[Any]] | None:
    entries = (choice.get("meta_info") or {}).get("output_token_logprobs")
    if isinstance(entries, list) and all(isinstance(e, list) and len(e) >= 2 for e in entries):
        return entries
    return None


def _sampled(choice: dict[str, Any], kind: str) -> SampledChoice:
    """The sampled ids, their logprobs and the finish reason of one choice."""
    response_ids = _int_list(choice.get("token_ids"))
    meta = _sglang_meta_logprobs(choice)
    meta_logprobs = _float_list([e[0] for e in meta]) if meta is not None else None
    if kind == "sglang":
        if response_ids is None and meta is not None:
            response_ids = _int_list([e[1] for e in meta])
        logprobs = meta_logprobs if meta_logprobs is not None else _vllm_logprobs(choice)
    else:
        logprobs = _vllm_logprobs(choice)
        if logprobs is None:
            logprobs = meta_logprobs
    finish = choice.get("finish_reason")
    index = choice.get("index")
    return SampledChoice(
        index=index if type(index) is int else 0,
        response_token_ids=response_ids,
        response_logprobs=logprobs,
        finish_reason=finish if isinstance(finish, str) else None,
    )


def extract(body: dict[str, Any], kind: str) -> Extracted:
    """Prompt ids, and the sampled ids, their logprobs and finish reason of each choice.

    vLLM: top-level `prompt_token_ids`, `choices[i].token_ids`,
    `choices[i].logprobs.content[].logprob`. SGLang: `choices[0].prompt_token_ids`,
    `choices[i].token_ids`, `choices[i].meta_info.output_token_logprobs` as
    `[logprob, id, text]`. Each falls back on the other's location; missing parts are None.
    The top-level fields are the first choice's; `choices` lists them all when there are
    several (`n > 1`), each at its position.
    """
    raw = body.get("choices")
    choices = [c if isinstance(c, dict) else {} for c in raw] if isinstance(raw, list) else []
    choice = choices[0] if choices else {}
    model = body.get("model") if isinstance(body.get("model"), str) else None
    top_prompt = _int_list(body.get("prompt_token_ids"))
    choice_prompt = _int_list(choice.get("prompt_token_ids"))
    if kind == "sglang":
        prompt_ids = choice_prompt if choice_prompt is not None else top_prompt
    else:
        prompt_ids = top_prompt if top_prompt is not None else choice_prompt
    sampled = [
        _sampled(c, kind).model_copy(update={"index": i}) for i, c in enumerate(choices)
    ] or [SampledChoice(index=0)]
    first = sampled[0]
    return Extracted(
        prompt_token_ids=prompt_ids,
        response_token_ids=first.response_token_ids,
        response_logprobs=first.response_logprobs,
        finish_reason=first.finish_reason,
        model=model,
        choices=sampled if len(sampled) > 1 else [],
    )


def strip_training_fields(body: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The caller's view of an upstream answer: training-only fields it did not ask for removed.

    `body` is left as it was: the top level and each choice are copied (shallowly), which
    is all this changes; nested values are shared.
    """
    out = dict(body)
    wants_ids = bool(request.get("return_token_ids"))
    wants_prompt_ids = wants_ids or bool(request.get("return_prompt_token_ids"))
    if not wants_prompt_ids:
        out.pop("prompt_token_ids", None)
    if isinstance(out.get("choices"), list):
        out["choices"] = [dict(c) if isinstance(c, dict) else c for c in out["choices"]]
    for choice in out.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        if not wants_ids:
            choice.pop("token_ids", None)
        if not wants_prompt_ids:
            choice.pop("prompt_token_ids", None)
        if not request.get("return_meta_info"):
            choice.pop("meta_info", None)
        if not request.get("logprobs") and "logprobs" in choice:
            choice["logprobs"] = None
    return out

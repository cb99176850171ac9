"""A trace token by token: decoded with the model's own tokenizer, trained tokens apart.

Each token gets its text (or its id when no tokenizer is at hand), whether it is
trained (loss_mask 1), context (prompt, or a mask-0 interstitial token), its logprob
and a heat bucket of it, and its hover text: id, logprob, policy version.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from polar.records import Trace

HEAT_BUCKETS = 6
"""Logprob heat classes `lp0` (probability near 1) .. `lp5` (improbable)."""


@dataclass(frozen=True)
class TokenView:
    """One token of a trace as the trace page shows it."""

    text: str
    kind: str  # "prompt", "context" (mask 0 after the prompt) or "trained"
    heat: str  # a CSS class: lp0..lp5, or "" without a logprob
    title: str


@dataclass
class TraceView:
    """The trace page's tokens and what decoded them."""

    trace: Trace
    prompt: list[TokenView]
    response: list[TokenView]
    decoded_by: str | None
    """The tokenizer's directory; None: token ids are shown."""

    @property
    def trained(self) -> int:
        return sum(1 for t in self.response if t.kind == "trained")


def heat(logprob: float | None) -> str:
    """The heat class of a logprob: its probability in HEAT_BUCKETS bands, high to low."""
    if logprob is None or not math.isfinite(logprob):
        return ""
    p = math.exp(min(0.0, logprob))
    return f"lp{min(HEAT_BUCKETS - 1, int((1.0 - p) * HEAT_BUCKETS))}"


@lru_cache(maxsize=2)
def tokenizer_at(path: str) -> Any:
    """The tokenizer at `path`, or None when it cannot be loaded."""
    try:
        from polar.tokenization import load_tokenizer

        return load_tokenizer(path)
    except Exception:  # noqa: BLE001 - no tokenizer: ids are shown, and the page says so
        return None


def decoder(path: Path | None) -> tuple[Any, str | None]:
    """A tokenizer for `path` and its name, or (None, None)."""
    if path is None or not Path(path).is_dir():
        return None, None
    tokenizer = tokenizer_at(str(path))
    return (tokenizer, str(path)) if tokenizer is not None else (None, None)


def texts(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each id's own text (decoded alone), or `#id` without a tokenizer."""
    if tokenizer is None:
        return [f"#{i}" for i in ids]
    try:
        return [str(t) for t in tokenizer.batch_decode([[i] for i in ids])]
    except Exception:  # noqa: BLE001 - an id outside the vocabulary: ids, never a crash
        return [f"#{i}" for i in ids]


def trace_view(trace: Trace, tokenizer_dir: Path | None) -> TraceView:
    """`trace`'s tokens, decoded when a tokenizer is at hand."""
    tokenizer, name = decoder(tokenizer_dir)
    version = trace.provenance.policy_version
    policy = f"policy v{version}" if version is not None else "policy version unknown"
    prompt = [
        TokenView(text, "prompt", "", f"id {i} · prompt · {policy}")
        for i, text in zip(trace.prompt_ids, texts(tokenizer, trace.prompt_ids), strict=True)
    ]
    response = []
    decoded = texts(tokenizer, trace.response_ids)
    for i, text, mask, logprob in zip(
        trace.response_ids, decoded, trace.loss_mask, trace.response_logprobs, strict=True
    ):
        trained = mask == 1
        kind = "trained" if trained else "context"
        shown = f"{logprob:.4f}" if trained else "n/a (context)"
        response.append(
            TokenView(
                text,
                kind,
                heat(logprob) if trained else "",
                f"id {i} · logprob {shown} · {policy}",
            )
        )
    return TraceView(trace, prompt, response, name)

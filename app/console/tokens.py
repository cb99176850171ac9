"""A trace token by token: decoded with the model's own tokenizer, trained tokens apart.

Each token gets its text (or its id when no tokenizer is at hand), whether it is
trained (loss_mask 1), context (prompt, or a mask-0 interstitial token), its logprob
and a heat bucket of it, and its hover text: id, logprob, policy version.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable
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

    @property
    def css(self) -> str:
        return f"tok {self.kind} {self.heat}".rstrip()


Spans = Callable[[str], list[tuple[int, int]]]
"""Where secrets are in a text (safety.Redactor.spans)."""
REDACTED = "[redacted]"


@dataclass
class TraceView:
    """The trace page's tokens and what decoded them."""

    trace: Trace
    prompt: list[TokenView]
    response: list[TokenView]
    decoded_by: str | None
    """The tokenizer's directory; None: token ids are shown."""
    every_token: bool = True
    """Each token its own span; False: runs of prompt and context tokens as one."""

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
    unique = sorted(set(ids))
    try:
        decoded = dict(zip(unique, tokenizer.batch_decode([[i] for i in unique]), strict=True))
        return [str(decoded[i]) for i in ids]
    except Exception:  # noqa: BLE001 - an id outside the vocabulary: ids, never a crash
        return [f"#{i}" for i in ids]


def redacted(texts: list[str], spans: Spans) -> tuple[list[str], set[int]]:
    """`texts` (a sequence's tokens) with every part of a secret of their joined text taken
    out (`[redacted]` in the token where it starts); the indices of the tokens touched."""
    found = sorted(spans("".join(texts)))
    if not found:
        return texts, set()
    out, hidden = list(texts), set[int]()
    starts = list(itertools.accumulate((len(t) for t in texts), initial=0))
    for begin, end in found:
        first = bisect.bisect_right(starts, begin) - 1
        last = bisect.bisect_left(starts, end) - 1
        hidden.update(k for k in range(first, last + 1) if texts[k])
    for k in hidden:
        out[k] = token_outside(texts[k], starts[k], found)
    return out, hidden


def token_outside(text: str, start: int, spans: list[tuple[int, int]]) -> str:
    """What of a token (at `start` of the joined text) lies outside `spans`, `[redacted]`
    where a span starts inside it."""
    pieces, pos, stop = [], 0, start + len(text)
    for begin, end in spans:
        if end <= start or begin >= stop:
            continue
        low, high = max(begin - start, 0), min(end - start, len(text))
        if low > pos:
            pieces.append(text[pos:low])
        if begin >= start:
            pieces.append(REDACTED)
        pos = max(pos, high)
    pieces.append(text[pos:])
    return "".join(pieces)


def runs(tokens: list[TokenView], policy: str) -> list[TokenView]:
    """`tokens` with each run of prompt or context tokens made one (its text joined), the
    trained ones left one by one: what the page shows unless asked for every token."""
    out: list[TokenView] = []
    run: list[TokenView] = []

    def close() -> None:
        if run:
            kind = run[0].kind
            text = "".join(t.text for t in run)
            out.append(TokenView(text, kind, "", f"{kind} · {len(run)} tokens · {policy}"))
            run.clear()

    for token in tokens:
        if token.kind == "trained":
            close()
            out.append(token)
        else:
            if run and run[0].kind != token.kind:
                close()
            run.append(token)
    close()
    return out


def trace_view(
    trace: Trace,
    tokenizer_dir: Path | None,
    spans: Spans | None = None,
    every_token: bool = False,
) -> TraceView:
    """`trace`'s tokens, decoded when a tokenizer is at hand; tokens that spell a secret
    (`spans`) blanked, their ids hidden too. Runs of prompt and context tokens are one
    span each unless `every_token`."""
    tokenizer, name = decoder(tokenizer_dir)
    version = trace.provenance.policy_version
    policy = f"policy v{version}" if version is not None else "policy version unknown"
    every = texts(tokenizer, trace.prompt_ids + trace.response_ids)
    hidden: set[int] = set()
    if spans is not None:
        every, hidden = redacted(every, spans)
    n = len(trace.prompt_ids)
    prompt = [
        TokenView(text, "prompt", "", "redacted" if k in hidden else f"id {i} · prompt · {policy}")
        for k, (i, text) in enumerate(zip(trace.prompt_ids, every[:n], strict=True))
    ]
    response = []
    for i, text, mask, logprob in zip(
        trace.response_ids, every[n:], trace.loss_mask, trace.response_logprobs, strict=True
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
    for k in hidden:
        if k >= n:
            response[k - n] = TokenView(response[k - n].text, response[k - n].kind, "", "redacted")
    if not every_token:
        prompt, response = runs(prompt, policy), runs(response, policy)
    return TraceView(trace, prompt, response, name, every_token)

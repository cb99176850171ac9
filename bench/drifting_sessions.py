"""Sessions whose every turn breaks the prefix chain: the drift the builders must index, not scan.

Made with `bench.tiny_backend.TinyBackend` (the tiny Qwen3-style template
with tools). One agent calls a shell tool each turn with reasoning and gets a
short file back; the harness sends each answer back changed, so the next
prompt re-renders the sampled turn:

* `think_dropped`: the harness drops `reasoning_content`, so the template
  renders the turn without its `<think>` block;
* `tool_args_reordered`: the harness re-serialises the tool-call arguments
  with their keys in reverse order.

Every `compact_every` calls the context is compacted into a summary, as an
agent at its context limit does (it keeps the largest prompt bounded).
Used by tests/unit/polar/builders/test_builders_drift.py and bench/bench_builders.py.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any, Literal

from bench.tiny_backend import SYSTEM, TOOLS, TinyBackend, assistant_text, tool_result
from polar.records import CompletionRecord

DriftVariant = Literal["think_dropped", "tool_args_reordered"]
DRIFT_VARIANTS: tuple[DriftVariant, ...] = ("think_dropped", "tool_args_reordered")
TASK = {"role": "user", "content": "The test suite fails; find and fix the bug."}


def short_file(rng: random.Random, name: str, lines: tuple[int, int] = (2, 6)) -> str:
    """A plausible source file of `lines` functions."""
    body = [f"# {name}"]
    for i in range(rng.randint(*lines)):
        body.append(f"def {name.replace('.', '_')}_{i}(x):\n    return x * {rng.randint(1, 99)}")
    return "\n".join(body) + "\n"


def sent_back(answer: dict[str, Any], variant: DriftVariant) -> dict[str, Any]:
    """The assistant message as the drifting harness puts it in its next request."""
    message = copy.deepcopy(answer)
    if variant == "think_dropped":
        message.pop("reasoning_content", None)
    else:
        for call in message.get("tool_calls") or []:
            arguments = json.loads(call["function"]["arguments"])
            call["function"]["arguments"] = json.dumps(dict(reversed(list(arguments.items()))))
    return message


def drifting_session(
    backend: TinyBackend,
    calls: int,
    variant: DriftVariant,
    *,
    compact_every: int = 250,
    seed: int = 0,
) -> list[CompletionRecord]:
    """`calls` model calls of one agent whose harness changes every answer it sends back."""
    if variant not in DRIFT_VARIANTS:
        raise ValueError(f"unknown drift variant {variant!r}; known: {DRIFT_VARIANTS}")
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [SYSTEM, TASK]
    for i in range(calls):
        if i and i % compact_every == 0:
            summary = f"Summary of the work so far ({i} calls): the bug is narrowed down."
            messages = [SYSTEM, {"role": "user", "content": summary}]
        last = i == calls - 1
        tool_calls = [] if last else [("bash", {"command": f"cat src/f{i}.py", "timeout": 30})]
        text = assistant_text(
            "The bug is fixed." if last else "", f"Step {i}: read src/f{i}.py.", tool_calls
        )
        answer = backend.call(messages, text, tools=TOOLS)
        messages.append(sent_back(answer, variant))
        if not last:
            messages.append(tool_result(answer, short_file(rng, f"f{i}.py")))
    return backend.records[-calls:] if calls else []

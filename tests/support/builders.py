"""Helpers of the builder tests: the tokenizer fixture, build contexts, invariants.

Records from token lists and the tiny-tokenizer backend (`TinyBackend`,
`record`, ...) live in bench/tiny_backend.py, shared with the benchmarks; they
are imported from there by name so the builder tests keep one import line.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench.tiny_backend import (
    REPO,
    SYSTEM,
    TINY_MODEL,
    TOOLS,
    TinyBackend,
    assistant_text,
    logprobs_for,
    parse_answer,
    record,
    tool_result,
)
from polar.builders import BuildContext, BuildOutput
from polar.records import CompletionRecord, Trace

__all__ = [
    "SYSTEM",
    "TINY_MODEL",
    "TOOLS",
    "TinyBackend",
    "assistant_text",
    "check_invariants",
    "check_prompts_are_prefixes",
    "context",
    "logprobs_for",
    "parse_answer",
    "record",
    "sampled",
    "tokenizer_dir_fixture",
    "tool_result",
]


@pytest.fixture(scope="session", name="tokenizer_dir")
def tokenizer_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built tiny model's tokenizer, or the same tokenizer built now (about a second)."""
    if (TINY_MODEL / ".complete").exists():
        return TINY_MODEL
    path = REPO / "infra" / "tiny_model" / "build_tiny_model.py"
    spec = importlib.util.spec_from_file_location("build_tiny_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("tiny-tokenizer")
    module.save_tokenizer(module.train_tokenizer(), out)
    return out


def context(builder: str, **config: Any) -> BuildContext:
    return BuildContext(
        session_id="s1", task_id="t1", harness="command", builder=builder, config=config
    )


# --------------------------------------------------------------------------- invariants


def sampled(trace: Trace) -> list[tuple[int, float]]:
    rows = zip(trace.response_ids, trace.loss_mask, trace.response_logprobs, strict=True)
    return [(t, lp) for t, m, lp in rows if m == 1]


def check_invariants(
    records: list[CompletionRecord],
    per_request: BuildOutput,
    merged: BuildOutput,
    *,
    prompts_are_prefixes: bool = True,
) -> None:
    """The token-fidelity invariants of prefix merging, against per_request."""
    by_id = {r.record_id: r for r in records}
    coverage_pr: Counter[tuple[str, int]] = Counter()
    for trace in per_request.traces:
        (rid,) = trace.provenance.record_ids
        coverage_pr.update((rid, i) for i in range(len(trace.response_ids)))
    coverage_pm: Counter[tuple[str, int]] = Counter()
    for trace in merged.traces:
        n = len(trace.response_ids)
        assert len(trace.loss_mask) == n and len(trace.response_logprobs) == n
        assert set(trace.loss_mask) <= {0, 1}
        assert all(
            lp == 0.0
            for m, lp in zip(trace.loss_mask, trace.response_logprobs, strict=True)
            if m == 0
        )
        members = [by_id[rid] for rid in trace.provenance.record_ids]
        assert trace.provenance.completion_seqs == [r.seq for r in members]
        assert [r.seq for r in members] == sorted(r.seq for r in members)
        # every mask-1 token is a sampled token, in order, with its logprob
        expected = [
            (t, lp)
            for r in members
            for t, lp in zip(r.response_token_ids or [], r.response_logprobs or [], strict=True)
        ]
        assert sampled(trace) == expected
        for r in members:
            coverage_pm.update((r.record_id, i) for i in range(len(r.response_token_ids or [])))
        stats = trace.provenance.reconstruction
        assert stats is not None and stats.members == len(members)
        assert stats.sampled_tokens == sum(trace.loss_mask)
        if prompts_are_prefixes or not stats.repairs:
            check_prompts_are_prefixes(trace, members)
    assert coverage_pm == coverage_pr
    assert len(merged.unusable) == len(per_request.unusable)


def check_prompts_are_prefixes(trace: Trace, members: list[CompletionRecord]) -> None:
    """Each member's prompt is a prefix of the trace, followed by its own sampled span (mask 1)."""
    full = trace.prompt_ids + trace.response_ids
    mask = [0] * len(trace.prompt_ids) + trace.loss_mask
    assert members[0].prompt_token_ids == trace.prompt_ids
    for r in members:
        prompt = r.prompt_token_ids or []
        response = r.response_token_ids or []
        assert full[: len(prompt)] == prompt, f"{r.record_id}: prompt not a prefix of the chain"
        end = len(prompt) + len(response)
        assert full[len(prompt) : end] == response
        assert mask[len(prompt) : end] == [1] * len(response)

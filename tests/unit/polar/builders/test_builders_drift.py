"""prefix_merging found by its chain index equals the old scan over every chain; the build
activity heartbeats its progress.

`quadratic_reference` is the matcher as it was before the index: each call
walked along every earlier chain of its attempt (`align` from the start) and
the best was picked by the same keys. On generated sessions (the property
tests' generator) and on drifting sessions (every turn breaks the chain) both
must give the same traces, token for token, with the same breaks; the drifting
sessions also keep the fidelity invariants.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from temporalio.testing import ActivityEnvironment

from activities.postrun_activities import PostrunActivities
from bench.drifting_sessions import DRIFT_VARIANTS, DriftVariant, drifting_session
from polar.builders import BuildContext, BuildOutput, get_builder
from polar.builders.base import end_of_turn_ids, prepare_records
from polar.builders.prefix_chains import Chain, Segment
from polar.builders.prefix_drift import Match, align
from polar.builders.prefix_merging import (
    PrefixMergingConfig,
    _first_segments,
    _followed_first,
    _output,
)
from polar.builders.progress import listening, report_progress
from polar.contracts import BuildRequest
from polar.records import BreakKind, CompletionRecord
from polar.settings import Settings
from polar.tasks.spec import BuilderSpec
from tests.support.builders import (
    TinyBackend,
    check_invariants,
    context,
    tokenizer_dir_fixture,  # noqa: F401  (the tokenizer_dir fixture)
)
from tests.unit.polar.builders.test_builders_properties import EOS, sessions_with_unusable


def quadratic_reference(records: list[CompletionRecord], ctx: BuildContext) -> BuildOutput:
    """prefix_merging as it chose chains before the index: every call against every chain."""
    config = PrefixMergingConfig.model_validate(ctx.config)
    prepared, unusable = prepare_records(records, config)
    prepared = _followed_first(prepared)
    eos = end_of_turn_ids(config)
    repair = config.repair == "response_span"
    chains: list[Chain] = []
    for step, item in enumerate(prepared):
        attempt = item.record.attempt
        matches = [align(c, item, eos) for c in chains if c.attempt == attempt]
        clean = [m for m in matches if m.extends(repair=False)]
        repairable = [m for m in matches if m.extends(repair)]
        best: Match | None = None
        if clean:
            best = max(clean, key=lambda m: (m.walked or 0, m.chain.last_used))
        elif repairable:
            best = max(repairable, key=lambda m: (m.first_change, m.walked or 0, m.chain.last_used))
        if best is not None:
            chain = best.chain
            assert best.walked is not None
            chain.repair(best.repaired_views)
            chain.repairs += [d.model_copy(update={"repaired": True}) for d in best.drifts]
            tail = item.prompt_ids[best.walked :]
            previous = chain.members[-1].response_ids
            if eos and not (previous and previous[-1] in eos) and any(t in eos for t in tail):
                chain.template_eos += 1
            chain.append(item, tail)
            chain.last_used = step
            continue
        started_by, segments = None, [Segment(list(item.prompt_ids))]
        if matches:
            closest = max(
                matches, key=lambda m: (m.walked is not None, m.first_change, m.chain.last_used)
            )
            started_by, (segments, _) = closest.brk, _first_segments(item.prompt_ids, closest)
        chain = Chain(
            trace_id=f"{ctx.session_id}/chain-{item.key}",
            attempt=attempt,
            members=[],
            segments=segments,
            prompt=list(item.prompt_ids),
            response=[],
            mask=[],
            logprobs=[],
            started_by=started_by,
            last_used=step,
        )
        chain.append(item, [])
        chains.append(chain)
    return _output(chains, ctx, config, eos, unusable)


def dumped(out: BuildOutput) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json") for t in out.traces]


def assert_same_as_reference(records: list[CompletionRecord], ctx: BuildContext) -> BuildOutput:
    indexed = get_builder("prefix_merging")(records, ctx)
    reference = quadratic_reference(records, ctx)
    assert dumped(indexed) == dumped(reference)
    assert indexed.breaks == reference.breaks and indexed.unusable == reference.unusable
    return indexed


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(sessions_with_unusable())
def test_index_chooses_as_the_scan_did(records: list[CompletionRecord]) -> None:
    assert_same_as_reference(records, context("prefix_merging", eos_token_ids=[EOS]))
    assert_same_as_reference(
        records, context("prefix_merging", eos_token_ids=[EOS], repair="response_span")
    )
    assert_same_as_reference(records, context("prefix_merging"))  # no end-of-turn ids known


@pytest.fixture(scope="module")
def tok(tokenizer_dir: Path) -> Any:
    from polar.tokenization import load_tokenizer

    return load_tokenizer(str(tokenizer_dir))


@pytest.mark.parametrize("variant", DRIFT_VARIANTS)
def test_a_break_at_every_turn_starts_a_chain_per_call(
    variant: DriftVariant, tok: Any, tokenizer_dir: Path
) -> None:
    records = drifting_session(TinyBackend(tok), 24, variant, compact_every=10)
    config = {"tokenizer": str(tokenizer_dir)}
    merged = assert_same_as_reference(records, context("prefix_merging", **config))
    per_request = get_builder("per_request")(records, context("per_request", **config))
    check_invariants(records, per_request, merged)
    kind = BreakKind.THINK_DROPPED if variant == "think_dropped" else BreakKind.TOOL_CALL_RERENDERED
    # one chain per call: 21 split by the drift, two by the compactions at calls 10 and 20
    assert len(merged.traces) == 24
    assert merged.breaks == {kind.value: 21, BreakKind.NEW_CONTEXT.value: 2}
    for trace in merged.traces[1:]:
        stats = trace.provenance.reconstruction
        assert stats is not None and stats.started_by is not None
        expected = BreakKind.NEW_CONTEXT if stats.started_by.seq - 1000 in (10, 20) else kind
        assert stats.started_by.kind is expected


@pytest.mark.parametrize("variant", DRIFT_VARIANTS)
def test_drift_is_repaired_into_one_chain_per_context(
    variant: DriftVariant, tok: Any, tokenizer_dir: Path
) -> None:
    records = drifting_session(TinyBackend(tok), 24, variant, compact_every=10)
    config = {"tokenizer": str(tokenizer_dir), "repair": "response_span"}
    repaired = assert_same_as_reference(records, context("prefix_merging", **config))
    per_request = get_builder("per_request")(
        records, context("per_request", tokenizer=str(tokenizer_dir))
    )
    check_invariants(records, per_request, repaired, prompts_are_prefixes=False)
    assert [len(t.provenance.record_ids) for t in repaired.traces] == [10, 10, 4]
    assert repaired.breaks == {BreakKind.NEW_CONTEXT.value: 2}
    stats = [t.provenance.reconstruction for t in repaired.traces]
    assert sum(len(s.repairs) for s in stats if s is not None) == 21


def test_the_builder_reports_its_progress(tok: Any, tokenizer_dir: Path) -> None:
    records = drifting_session(TinyBackend(tok), 6, "think_dropped")
    seen: list[tuple[int, int]] = []
    with listening(lambda done, total: seen.append((done, total))):
        get_builder("prefix_merging")(records, context("prefix_merging"))
    assert seen == [(n, 6) for n in range(7)]
    get_builder("prefix_merging")(records, context("prefix_merging"))  # no listener: no report
    assert len(seen) == 7


# --------------------------------------------------------------------------- heartbeats

BUILD_SEEN = threading.Event()
"""Set when the build activity heartbeated the waiting builder's progress."""


def waiting_builder(records: list[CompletionRecord], ctx: BuildContext) -> BuildOutput:
    """A builder (by import path) that reports one call built, then waits for its heartbeat."""
    report_progress(1, len(records))
    assert BUILD_SEEN.wait(60), "no heartbeat carried the build's progress"
    report_progress(len(records), len(records))
    return get_builder("per_request")(records, ctx)


class WaitingStorage:
    """Storage that reads two records, then waits until a heartbeat says so."""

    def __init__(self, records: list[CompletionRecord]) -> None:
        self.records = records
        self.read_seen = threading.Event()
        self.traces: dict[str, int] = {}

    def list_completions(
        self, session_id: str, on_read: Callable[[int, int], None] | None = None
    ) -> list[CompletionRecord]:
        assert on_read is not None
        on_read(2, len(self.records))
        assert self.read_seen.wait(60), "no heartbeat carried the reading progress"
        on_read(len(self.records), len(self.records))
        return list(self.records)

    def put_traces(self, key: str, traces: list[Any]) -> int:
        self.traces[key] = len(traces)
        return 1


async def test_the_build_activity_heartbeats_what_it_has_read_and_built(
    tok: Any,
) -> None:
    records = drifting_session(TinyBackend(tok), 5, "think_dropped")
    storage = WaitingStorage(records)
    BUILD_SEEN.clear()
    beats: list[dict[str, Any]] = []

    def on_heartbeat(*details: Any) -> None:
        beat = details[0]
        beats.append(beat)
        if beat.get("step") == "loading completions" and beat.get("records_read") == 2:
            storage.read_seen.set()
        if beat.get("step") == "building" and beat.get("calls_built") == 1:
            BUILD_SEEN.set()

    env = ActivityEnvironment()
    env.on_heartbeat = on_heartbeat
    acts = PostrunActivities(Settings(), storage)  # type: ignore[arg-type]
    spec = BuilderSpec(name="tests.unit.polar.builders.test_builders_drift:waiting_builder")
    request = BuildRequest(session_id="s1", task_id="t1", harness="command", builder=spec)
    built = await env.run(acts.build_trajectory, request)
    assert built.num_traces == 5
    # every beat also says how long the step has run (`elapsed_s`, activities/heartbeat.py)
    assert all(isinstance(b.pop("elapsed_s"), float) for b in beats)
    assert {"step": "loading completions", "records_read": 2, "records": 5} in beats
    assert {
        "step": "building",
        "completions": 5,
        "records_read": 5,
        "records": 5,
        "unseen": 0,
        "calls_built": 1,
        "calls": 5,
    } in beats

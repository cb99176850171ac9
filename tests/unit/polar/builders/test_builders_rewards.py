"""Reward policies, builder config validation, and the build/score activities around builders."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.postrun_activities import PostrunActivities
from polar.advantages import trace_advantages
from polar.builders import check_builder, get_builder
from polar.builders.reward_policies import assign_rewards, trace_reward
from polar.contracts import BuildRequest, ScoreRequest
from polar.records import CompletionRecord, SessionStatus, Trace
from polar.settings import Settings
from polar.storage import Storage, rewards_key
from polar.tasks.spec import BuilderSpec, TaskSpec
from tests.support.builders import context, record

HARNESS = {"command": "true"}

CUSTOM = f"{__name__}:custom"
"""This module's `custom` builder, by the name a spec gives it."""


def three_calls() -> list[CompletionRecord]:
    """A chain of two calls (stopped on end token 2) and an unrelated third."""
    return [
        record(0, [5, 6], [7, 2]),
        record(1, [5, 6, 7, 2, 1, 8], [9, 2]),
        record(2, [4], [3, 3], finish="length"),
    ]


def test_broadcast_and_session_normalised_rewards() -> None:
    assert trace_reward(1.0, 4, "broadcast") == 1.0
    assert trace_reward(1.0, 4, "session_normalized") == 0.25
    assert trace_reward(None, 4, "session_normalized") is None
    assert trace_reward(0.5, 0, "session_normalized") == 0.5
    for name, n in (("per_request", 3), ("prefix_merging", 2)):
        out = get_builder(name)(three_calls(), context(name, reward="session_normalized"))
        assert len(out.traces) == n
        assign_rewards(out.traces, 1.0, SessionStatus.TIMEOUT)
        assert [t.reward for t in out.traces] == [pytest.approx(1.0 / n)] * n
        assert sum(t.reward or 0 for t in out.traces) == pytest.approx(1.0)
        assert {t.status for t in out.traces} == {SessionStatus.TIMEOUT}
        # masks are left as built, whatever the status
        assert all(sum(t.loss_mask) for t in out.traces)


def test_no_evaluation_means_no_reward() -> None:
    out = get_builder("per_request")(three_calls(), context("per_request"))
    assign_rewards(out.traces, None, SessionStatus.ERROR)
    assert {t.reward for t in out.traces} == {None}
    assert {t.status for t in out.traces} == {SessionStatus.ERROR}


@pytest.mark.parametrize(
    ("builder", "problem"),
    [
        ({"name": "prefix_merging", "config": {"repair": "everything"}}, "repair"),
        ({"name": "prefix_merging", "config": {"reward": "share"}}, "reward"),
        ({"name": "per_request", "config": {"repair": "response_span"}}, "repair"),
        ({"name": "per_request", "config": {"tokenizer": 3}}, "tokenizer"),
        (
            {"name": CUSTOM, "config": {"reward": "x"}},
            "reward",
        ),
    ],
)
def test_builder_configs_are_validated(builder: dict[str, Any], problem: str) -> None:
    spec = TaskSpec.model_validate({"task_id": "t", "harness": HARNESS, "builder": builder})
    with pytest.raises(ValueError, match=problem):
        check_builder(spec.builder)  # at submit and in the build activity


def test_valid_builder_configs() -> None:
    for builder in (
        {"name": "prefix_merging", "config": {"repair": "response_span", "eos_token_ids": [2]}},
        {"name": "per_request", "config": {"reward": "session_normalized", "tokenizer": "/m"}},
        {"name": CUSTOM, "config": {"anything": 1}},
    ):
        spec = TaskSpec.model_validate({"task_id": "t", "harness": HARNESS, "builder": builder})
        check_builder(spec.builder)


def custom(records: list[CompletionRecord], ctx: Any) -> Any:
    """A custom builder (by import path): per_request under another name."""
    return get_builder("per_request")(records, ctx)


class MemoryStorage(Storage):
    """Storage with its objects in a dict (no S3): the traces and the rewards sidecar are
    written and joined by Storage's own methods."""

    def __init__(self, records: list[CompletionRecord]) -> None:
        super().__init__(Settings())
        self.records = records
        self.objects: dict[str, bytes] = {}

    def list_completions(self, session_id: str, on_read: Any = None) -> list[CompletionRecord]:
        if on_read is not None:
            on_read(len(self.records), len(self.records))
        return list(self.records)

    def put_bytes(self, key: str, data: bytes, content_type: str = "") -> int:
        self.objects[key] = data
        return len(data)

    def get_bytes(self, key: str) -> bytes:
        return self.objects[key]  # KeyError if there is none, as Storage's


@pytest.mark.parametrize("name", ["prefix_merging", CUSTOM])
async def test_build_and_score_activities(name: str) -> None:
    storage = MemoryStorage(three_calls())
    acts = PostrunActivities(Settings(), storage)
    env = ActivityEnvironment()
    config: dict[str, Any] = {"reward": "session_normalized"}
    if name == "prefix_merging":
        config["eos_token_ids"] = [2]
    spec = BuilderSpec(name=name, config=config)
    built = await env.run(
        acts.build_trajectory,
        BuildRequest(session_id="s1", task_id="t1", harness="command", builder=spec),
    )
    n = 2 if name == "prefix_merging" else 3
    assert (built.num_completions, built.num_traces, built.num_response_tokens) == (3, n, 6)
    assert built.breaks == ({"new_context": 1} if name == "prefix_merging" else {})
    as_built = storage.objects[built.traces_key]
    scored = await env.run(
        acts.score_traces,
        ScoreRequest(traces_key=built.traces_key, reward=1.0, status=SessionStatus.COMPLETED),
    )
    assert scored.num_traces == n and scored.num_response_tokens == 6
    # the traces are written once (by build); the rewards go in the sidecar beside them
    assert storage.objects[built.traces_key] == as_built
    assert scored.rewards_key == rewards_key(built.traces_key)
    sidecar = storage.objects[scored.rewards_key]
    assert scored.trace_bytes == len(as_built) + len(sidecar)
    traces = storage.load_traces(built.traces_key)
    assert [t.reward for t in traces] == [pytest.approx(1 / n)] * n
    assert {t.status for t in traces} == {SessionStatus.COMPLETED}
    assert {t.provenance.reward_policy for t in traces} == {"session_normalized"}
    unjoined = storage.load_traces(built.traces_key, rewarded=False)
    assert {(t.reward, t.status) for t in unjoined} == {(None, None)}
    # scored again (a retried activity): it reads the traces as built, not its own sidecar
    await env.run(
        acts.score_traces,
        ScoreRequest(traces_key=built.traces_key, reward=None, status=SessionStatus.ERROR),
    )
    rescored = storage.load_traces(built.traces_key)
    assert {(t.reward, t.status) for t in rescored} == {(None, SessionStatus.ERROR)}


# (session, status, reward, calls): one group of four outcomes
MIXED_GROUP = [
    ("ok", SessionStatus.COMPLETED, 1.0, 3),
    ("wrong", SessionStatus.COMPLETED, 0.0, 1),
    ("slow", SessionStatus.TIMEOUT, 0.5, 2),
    ("broken", SessionStatus.ERROR, None, 2),
]


def scored_group(
    policy: str, outcomes: list[tuple[str, SessionStatus, float | None, int]]
) -> list[Trace]:
    """Each session (id, status, reward, calls) built by per_request and scored under
    `policy` as `score_traces` does."""
    traces: list[Trace] = []
    for sid, status, reward, calls in outcomes:
        ctx = dataclasses.replace(context("per_request", reward=policy), session_id=sid)
        out = get_builder("per_request")(three_calls()[:calls], ctx)
        assign_rewards(out.traces, reward, status)
        traces += out.traces
    return traces


def mixed_group(policy: str) -> list[Trace]:
    """Every session of MIXED_GROUP, scored under `policy`."""
    return scored_group(policy, MIXED_GROUP)


@pytest.mark.parametrize("policy", ["broadcast", "session_normalized"])
def test_a_mixed_group_gets_the_promised_advantages(policy: str) -> None:
    traces = mixed_group(policy)
    got = trace_advantages(traces)
    # baseline: the three sessions the evaluator graded (timeout included), error left out
    std = (((1.0 - 0.5) ** 2 + (0.0 - 0.5) ** 2 + 0.0) / 3) ** 0.5
    session = {"ok": 0.5 / (std + 1e-6), "wrong": -0.5 / (std + 1e-6), "slow": 0.0}
    calls = {sid: n for sid, _, _, n in MIXED_GROUP}
    for trace in traces:
        sid = trace.provenance.session_id
        if sid == "broken":
            assert got[trace.trace_id] is None  # never a 0-reward sample
            continue
        share = calls[sid] if policy == "session_normalized" else 1
        assert got[trace.trace_id] == pytest.approx(session[sid] / share, rel=1e-12)
    assert session["ok"] == pytest.approx(6**0.5 / 2, rel=1e-5)  # 1.2247…
    # each session's traces together carry its advantage once under session_normalized
    if policy == "session_normalized":
        total = sum(
            a
            for t in traces
            if t.provenance.session_id == "ok"
            for a in [got[t.trace_id]]
            if a is not None
        )
        assert total == pytest.approx(session["ok"])
    # the session rewards a TaskResult reports give the same answer
    rewards = {sid: r for sid, _, r, _ in MIXED_GROUP}
    assert trace_advantages(traces, rewards) == got
    # a group with a single graded session has no signal; unscored stays None
    lone = [t for t in traces if t.provenance.session_id in ("ok", "broken")]
    assert {trace_advantages(lone)[t.trace_id] for t in lone} == {0.0, None}

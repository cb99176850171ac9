"""slime's rollout function fills slime's `Sample`s from Polar's traces exactly.

With slime's own `Sample` where a slime checkout imports (`PYTHONPATH=/path/to/slime`), else
with `tests.support.slime_standin` (slime's documented fields at 624b824a: a schema check).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from polar.contracts import SessionResult, TaskResult
from polar.records import SessionStatus, Trace, TraceProvenance
from polar.trainers._sessions import SessionRun, Unscored, UnscoredBatch
from polar.trainers.slime import (
    GroupRollout,
    RolloutConfig,
    check_rollout,
    generate_rollout,
    group_task,
    post_process_rewards,
    session_samples,
)
from polar.trainers.slime_layout import SLIME_SAMPLE_FIELDS
from tests.support.slime_standin import GroupingSource, slime_api

API = slime_api()
TEMPLATE = {"task_id": "digits", "harness": {"kind": "command", "command": "python agent.py"}}


def trace(trace_id: str, seqs: list[int], offset: int, status: SessionStatus) -> Trace:
    return Trace(
        trace_id=trace_id,
        prompt_ids=[offset, offset + 1, offset + 2],
        response_ids=[offset + 10, offset + 11, offset + 12, offset + 13],
        loss_mask=[1, 1, 0, 1],
        response_logprobs=[-0.125, -1e-9, 0.0, -2.0000000000000004],
        response_message={"role": "assistant", "content": "12"},
        reward=0.75,
        status=status,
        provenance=TraceProvenance(
            session_id="digits-1-s0",
            task_id="digits-1",
            harness="command",
            builder="prefix_merging",
            model="policy",
            completion_seqs=seqs,
            record_ids=[f"r{s}" for s in seqs],
            policy_version=7,
        ),
    )


def session_run(traces: list[Trace], status: SessionStatus) -> SessionRun:
    session = SessionResult(
        session_id="digits-1-s0",
        task_id="digits-1",
        index=0,
        status=status,
        reward=0.75,
        harness="command",
        traces_key="sessions/digits-1-s0/traces/prefix_merging.jsonl",
        stage_seconds={"run": 1.5, "evaluate": 0.25},
    )
    task = TaskResult.model_validate(
        {"task_id": "digits-1", "sessions": [session.model_dump(mode="json")]}
    )
    return SessionRun(task, "polar-task-digits-1", session, traces)


def group(n: int = 2, **metadata: Any) -> list[Any]:
    prompt = [{"role": "user", "content": "write a number"}]
    source = GroupingSource(API.sample, [prompt], n, metadata=metadata)
    source.get_samples(1)  # a second group: slime's indexes go on
    (g,) = source.get_samples(1)
    for sample in g:
        sample.label = "digits"
    return g


def test_a_two_chain_session_gives_one_sample_per_chain_sharing_its_rollout_id() -> None:
    # the second chain's first call came first: it is the root chain
    late = trace("t-late", [2, 3], 100, SessionStatus.COMPLETED)
    early = trace("t-early", [0, 1], 200, SessionStatus.COMPLETED)
    base = group()[1]
    samples = session_samples(base, session_run([late, early], SessionStatus.COMPLETED))
    assert samples[0] is base and len(samples) == 2
    for sample, t in zip(samples, [early, late], strict=True):
        assert sample.tokens == t.prompt_ids + t.response_ids
        assert sample.response_length == len(t.response_ids)
        assert sample.loss_mask == t.loss_mask
        assert sample.rollout_log_probs == t.response_logprobs  # bit for bit
        assert sample.reward == 0.75
        assert sample.weight_versions == ["7"]
        assert sample.status == API.sample.Status.COMPLETED
        # slime's own ids, prompt and label are kept; the session is one rollout
        assert (sample.group_index, sample.index, sample.rollout_id) == (1, 3, 3)
        assert sample.prompt == [{"role": "user", "content": "write a number"}]
        assert sample.label == "digits"
        assert sample.session_id == "digits-1-s0"
        polar = sample.metadata["polar"]
        assert polar["trace_id"] == t.trace_id and polar["chains"] == 2
        assert polar["workflow_id"] == "polar-task-digits-1" and polar["rerun"] == 0
        assert sample.response == ""  # two model calls: no single response text
        # slime's documented fields only, and to_dict/from_dict reload it unchanged
        data = sample.to_dict()
        assert set(data) <= SLIME_SAMPLE_FIELDS
        again = API.sample.from_dict(json.loads(json.dumps(data)))
        assert again.tokens == sample.tokens and again.rollout_log_probs == t.response_logprobs
        assert again.status == sample.status
    if API.validate_rollout_id_annotated is not None:  # slime's own check of compact rollouts
        API.validate_rollout_id_annotated([[samples]])
        samples[1].rollout_id = 99
        with pytest.raises(AssertionError, match="share rollout_id"):
            API.validate_rollout_id_annotated([[samples]])


def test_a_graded_failed_harness_is_slime_failed_and_one_call_keeps_its_text() -> None:
    t = trace("t", [0], 0, SessionStatus.HARNESS_FAILED)
    (sample,) = session_samples(group()[0], session_run([t], SessionStatus.HARNESS_FAILED))
    assert sample.status == API.sample.Status.FAILED
    assert sample.response == "12"


def test_the_group_task_is_the_template_with_the_rows_fields_and_the_prompts_instruction() -> None:
    config = RolloutConfig(task=TEMPLATE)
    spec = group_task(config, group(3), version=4)
    assert spec.num_sessions == 3 and spec.policy_version == 4
    assert spec.instruction == "write a number" and spec.task_id.startswith("digits-")
    row = {"instruction": "only this", "num_sessions": 9}
    spec = group_task(RolloutConfig(task=TEMPLATE), group(2, polar_task=row), version=None)
    assert spec.instruction == "only this" and spec.num_sessions == 2
    with pytest.raises(ValueError, match="polar_task"):
        group_task(RolloutConfig(), group(1), version=None)


def test_settings_come_from_slimes_args(tmp_path: Path) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps(TEMPLATE))
    args = argparse.Namespace(polar_task=str(task), polar_policy_version="5", polar_max_attempts=3)
    config = RolloutConfig.from_args(args)
    assert config.task == TEMPLATE and config.policy_version == 5 and config.max_attempts == 3
    defaults = RolloutConfig.from_args(argparse.Namespace())
    assert defaults.policy_version is None and defaults.min_scored == 0.0
    assert RolloutConfig.from_args(argparse.Namespace(polar_min_scored=None)).min_scored is None
    assert RolloutConfig.from_args(argparse.Namespace(polar_min_scored=0.5)).min_scored == 0.5
    with pytest.raises(ValueError, match="min_scored"):
        RolloutConfig.from_args(argparse.Namespace(polar_min_scored=3))


def rollout_state(size: int, scored: list[int], why: Unscored) -> GroupRollout:
    """A group of `size` samples after a task: `scored` filled, the others left out by `why`."""
    state = GroupRollout(group(size))
    for i in range(size):
        if i in scored:
            state.out[i] = [state.group[i]]
        else:
            state.why[i] = why
    state.pending = [i for i in range(size) if i not in scored]
    return state


def test_a_rollout_raises_where_too_few_samples_were_scored() -> None:
    prepare = Unscored("task_error", "prepare: PrepareFailed: exit 3")
    engine = Unscored("infra_error:engine", "run: APIError")
    config = RolloutConfig(task=TEMPLATE, max_attempts=2)
    # every session of the first tasks ended task_error: raised at once, with the outcome
    with pytest.raises(UnscoredBatch) as raised:
        check_rollout([rollout_state(2, [], prepare), rollout_state(2, [], prepare)], config, 0)
    assert "0 of 4 sessions scored (min_scored 0.0): 4 × task_error (prepare: Prepare" in str(
        raised.value
    )
    # one infra error of four: rerun (no raise) after the first tasks, raised after the last
    mixed = [rollout_state(2, [0, 1], engine), rollout_state(2, [0], engine)]
    check_rollout(mixed, config, 0)
    with pytest.raises(UnscoredBatch, match="3 of 4 sessions scored .* infra_error:engine"):
        check_rollout(mixed, config, 1)
    # under min_scored: raised after the first tasks, before any rerun
    strict = RolloutConfig(task=TEMPLATE, max_attempts=2, min_scored=0.8)
    with pytest.raises(UnscoredBatch, match="3 of 4 sessions scored \\(min_scored 0.8\\)"):
        check_rollout(mixed, strict, 0)
    # a task_error is never rerun (it would end the same), whatever the share
    hopeless = [rollout_state(2, [0, 1], prepare), rollout_state(2, [0], prepare)]
    with pytest.raises(UnscoredBatch, match="1 × task_error"):
        check_rollout(hopeless, config, 0)
    check_rollout([rollout_state(2, [0, 1], engine)], config, 1)  # all scored


def test_evaluation_is_refused_with_what_to_set() -> None:
    with pytest.raises(ValueError, match="--eval-function-path"):
        generate_rollout(argparse.Namespace(), 0, None, evaluation=True)


def reward_samples(rewards: list[list[float]], chains: dict[int, int]) -> list[Any]:
    """Samples of groups of sessions (`rewards[g][s]`), session `i` (global index) with
    `chains.get(i, 1)` chains, flattened in slime's order."""
    out = []
    index = 0
    for g, group_rewards in enumerate(rewards):
        for reward in group_rewards:
            for _ in range(chains.get(index, 1)):
                out.append(API.sample(group_index=g, index=index, rollout_id=index, reward=reward))
            index += 1
    return out


def slime_default(rewards: list[list[float]], std: bool) -> list[float]:
    """slime's `_post_process_rewards` (624b824a) for equal groups of one-chain sessions."""
    import torch

    values = torch.tensor(rewards, dtype=torch.float)
    values = values - values.mean(dim=-1, keepdim=True)
    if std:
        values = values / (values.std(dim=-1, keepdim=True) + 1e-6)
    return [float(v) for v in values.flatten()]


@pytest.mark.parametrize("std", [True, False])
def test_rewards_are_normalised_per_group_with_each_session_once(std: bool) -> None:
    rewards = [[1.0, 0.0, 0.5], [0.25, 0.25, 1.0]]
    args = argparse.Namespace(
        advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=std
    )
    expected = slime_default(rewards, std)
    raw, got = post_process_rewards(args, reward_samples(rewards, {}))
    assert raw == [r for group in rewards for r in group]
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-6)  # slime's own, where chains are 1
    # a session of three chains and one of two: the same per-session values, repeated
    samples = reward_samples(rewards, {1: 3, 4: 2})
    _, got = post_process_rewards(args, samples)
    per_session = {s.rollout_id: v for s, v in zip(samples, got, strict=True)}
    assert len(got) == 9 and list(per_session.values()) == pytest.approx(expected, abs=1e-6)
    assert [v for s, v in zip(samples, got, strict=True) if s.rollout_id == 1] == [got[1]] * 3


def test_other_estimators_and_reward_keys_keep_the_raw_rewards() -> None:
    samples = reward_samples([[1.0, 0.0]], {})
    for sample in samples:
        sample.reward = {"polar": sample.reward}
    args = argparse.Namespace(advantage_estimator="ppo", reward_key="polar")
    assert post_process_rewards(args, samples) == ([1.0, 0.0], [1.0, 0.0])
    args = argparse.Namespace(
        advantage_estimator="grpo", rewards_normalization=False, reward_key="polar"
    )
    assert post_process_rewards(args, samples) == ([1.0, 0.0], [1.0, 0.0])

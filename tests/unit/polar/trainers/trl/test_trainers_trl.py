"""TRL's rollout function: groups from TRL's repeated prompts, rows exactly from Polar's traces,
untrainable sessions as masked rows with no reward and their outcome, a batch with nothing scored
refused, the version bumped by weight syncs only, prefetched tasks taken only when fresh; the
async worker's groups refused the same way.

The real thing (TRL's GRPOTrainer stepping on real sessions): tests/system/test_trl_rollout_func.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from polar.client.sdk import TaskRun
from polar.contracts import SessionResult, TaskResult
from polar.records import SessionStatus, Trace, TraceProvenance
from polar.trainers._sessions import UnscoredBatch
from polar.trainers.trl import (
    GroupRun,
    PolarRolloutFunc,
    PolarRolloutWorker,
    Prefetched,
    polar_reward,
    prompt_text,
    rollout_samples,
)
from polar.trainers.weights import write_safetensors

TEMPLATE = {"task_id": "digits", "harness": {"kind": "command", "command": "python agent.py"}}
EOS = 2


def trace(trace_id: str, session_id: str, seq: int, offset: int, version: int = 3) -> Trace:
    return Trace(
        trace_id=trace_id,
        prompt_ids=[offset, offset + 1],
        response_ids=[offset + 10, offset + 11, offset + 12],
        loss_mask=[1, 0, 1],
        response_logprobs=[-0.5, 0.0, -1.25],
        reward=0.5,
        provenance=TraceProvenance(
            session_id=session_id,
            task_id="digits-1",
            harness="command",
            builder="prefix_merging",
            model="policy",
            completion_seqs=[seq],
            record_ids=[f"{trace_id}-r"],
            policy_version=version,
        ),
    )


def session(
    sid: str, index: int, status: SessionStatus, reward: float | None, **fields: Any
) -> SessionResult:
    return SessionResult(
        session_id=sid,
        task_id="digits-1",
        index=index,
        status=status,
        reward=reward,
        harness="command",
        traces_key=f"sessions/{sid}/traces/prefix_merging.jsonl" if reward is not None else None,
        **fields,
    )


PREPARE_FAILED = "prepare: ApplicationError: prepare action 0 exited 3"


def failed(sid: str, index: int) -> SessionResult:
    """A session whose task cannot run (its prepare step fails): `task_error`."""
    return session(
        sid,
        index,
        SessionStatus.ERROR,
        None,
        error=PREPARE_FAILED,
        error_type="PrepareFailed",
        error_stage="prepare",
    )


def group_of(*sessions: SessionResult, traces: dict[str, list[Trace]] | None = None) -> GroupRun:
    group = GroupRun(
        "task-wf", TaskResult(task_id="digits-1", sessions=list(sessions), policy_version=3)
    )
    group.sessions = [(s, (traces or {}).get(s.session_id, [])) for s in sessions]
    return group


def fake_trainer() -> Any:
    return SimpleNamespace(processing_class=SimpleNamespace(eos_token_id=EOS))


def test_prompt_text_and_groups_follow_trls_repeat_sampler() -> None:
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "digits"}]
    assert prompt_text(chat) == "digits" and prompt_text("plain") == "plain"
    with pytest.raises(ValueError, match="user message"):
        prompt_text([{"role": "system", "content": "x"}])
    assert PolarRolloutFunc.groups(["a", "a", "b", "b"], 2) == ["a", "b"]
    with pytest.raises(ValueError, match="num_generations"):
        PolarRolloutFunc.groups(["a", "b", "b", "b"], 2)
    with pytest.raises(ValueError, match="groups of 3"):
        PolarRolloutFunc.groups(["a", "a"], 3)


def test_rows_are_the_first_chains_and_unscored_sessions_are_masked_rows_without_reward() -> None:
    rollout = PolarRolloutFunc(TEMPLATE, prefetch=False)
    rollout.version = 4
    good = trace("t0", "s0", 0, 100)
    late_chain = trace("t0b", "s0", 2, 300)  # the same session's chain that broke off
    other = trace("t1", "s1", 0, 200)
    group = GroupRun(
        "task-wf",
        TaskResult(
            task_id="digits-1",
            sessions=[
                session("s0", 0, SessionStatus.COMPLETED, 0.5),
                session("s1", 1, SessionStatus.TIMEOUT, 0.0),
                session("s2", 2, SessionStatus.ERROR, None),
            ],
            policy_version=3,
        ),
    )
    group.sessions = [
        (group.result.sessions[0], [late_chain, good]),
        (group.result.sessions[1], [other]),
        (group.result.sessions[2], []),
    ]
    rows = rollout.rows([group], fake_trainer())
    assert rows["prompt_ids"][:2] == [good.prompt_ids, other.prompt_ids]
    assert rows["completion_ids"][:2] == [good.response_ids, other.response_ids]
    assert rows["logprobs"][:2] == [good.response_logprobs, other.response_logprobs]
    assert rows["env_mask"][:2] == [good.loss_mask, other.loss_mask]
    assert rows["polar_trace_id"] == ["t0", "t1", None]
    assert rows["polar_chains"] == [2, 1, 0]
    assert rows["polar_left_out_tokens"] == [2, 0, 0]
    assert rows["polar_staleness"] == [1, 1, None]
    # the errored session: a row TRL cannot train on and cannot count as a 0 reward
    assert rows["completion_ids"][2] == [EOS] and rows["env_mask"][2] == [0]
    assert rows["polar_reward"] == [0.5, 0.0, None]
    assert polar_reward(rows["completion_ids"], polar_reward=rows["polar_reward"]) == [
        0.5,
        0.0,
        None,
    ]
    # every row names its session's outcome; the unscored one why it is not trained on
    assert rows["polar_outcome"] == ["ok", "timeout", "infra_error:engine"]
    assert rows["polar_left_out"] == [None, None, "infra_error:engine: None: error"]
    assert rollout.stats.unscored_reasons == {"infra_error:engine": 1}
    assert rollout.stats.chains_left_out == 1 and rollout.stats.tokens_left_out == 2
    assert {k: len(v) for k, v in rows.items()} == dict.fromkeys(rows, 3)


def test_a_batch_with_no_scored_session_raises_and_min_scored_sets_the_share() -> None:
    rollout = PolarRolloutFunc(TEMPLATE, prefetch=False)
    nothing = group_of(failed("s0", 0), failed("s1", 1), failed("s2", 2))
    rows = rollout.rows([nothing], fake_trainer())
    assert rows["polar_outcome"] == ["task_error"] * 3
    assert rows["polar_left_out"] == [f"task_error: {PREPARE_FAILED}"] * 3
    with pytest.raises(UnscoredBatch) as raised:
        rollout.check_scored([nothing])
    assert f"0 of 3 sessions scored (min_scored 0.0): 3 × task_error ({PREPARE_FAILED})" in str(
        raised.value
    )
    # one of three scored: enough by default, not under min_scored 0.5
    ok = session("s3", 0, SessionStatus.COMPLETED, 1.0)
    mixed = group_of(ok, failed("s4", 1), failed("s5", 2), traces={"s3": [trace("t", "s3", 0, 0)]})
    rollout.check_scored([mixed])
    strict = PolarRolloutFunc(TEMPLATE, prefetch=False, min_scored=0.5)
    with pytest.raises(UnscoredBatch, match="1 of 3 sessions scored"):
        strict.check_scored([mixed])
    PolarRolloutFunc(TEMPLATE, prefetch=False, min_scored=0.3).check_scored([mixed])
    PolarRolloutFunc(TEMPLATE, prefetch=False, min_scored=None).check_scored([nothing])
    with pytest.raises(ValueError, match="min_scored"):
        PolarRolloutFunc(TEMPLATE, min_scored=2.0)


def test_the_policy_version_counts_weight_syncs_only() -> None:
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=0))
    frozen = PolarRolloutFunc(TEMPLATE, weights=None, initial_version=2)
    for step in (1, 2, 3):  # optimizer steps, no weights synced: the policy served is the same
        trainer.state.global_step = step
        frozen._sync_if_stepped(trainer)
    assert frozen.version == 2 and frozen.stats.syncs == 0
    frozen.version = 5  # a caller that synced the weights itself says which version it served
    trainer.state.global_step = 4
    frozen._sync_if_stepped(trainer)
    assert frozen.version == 5


def test_polar_reward_refuses_rows_not_from_polar() -> None:
    with pytest.raises(ValueError, match="PolarRolloutFunc"):
        polar_reward(["a"])
    with pytest.raises(ValueError, match="1 Polar rewards for 2"):
        polar_reward(["a", "b"], polar_reward=[1.0])


def test_a_prefetched_task_is_taken_only_for_its_prompt_and_within_max_staleness() -> None:
    rollout = PolarRolloutFunc(TEMPLATE, max_staleness=1)
    rollout.version = 5
    rollout.pending = [
        Prefetched("digits", TaskRun("a", "wf-old"), version=3, submitted=0.0),
        Prefetched("digits", TaskRun("b", "wf-ok"), version=4, submitted=0.0),
        Prefetched("letters", TaskRun("c", "wf-other"), version=5, submitted=0.0),
    ]
    taken = rollout._take_prefetched("digits")
    assert taken is not None and taken.run.workflow_id == "wf-ok"
    assert rollout._take_prefetched("digits") is None  # only a stale one left
    with pytest.raises(ValueError, match="max_staleness"):
        PolarRolloutFunc(TEMPLATE, max_staleness=-1)


def test_a_groups_task_carries_the_prompt_size_and_version() -> None:
    rollout = PolarRolloutFunc(TEMPLATE)
    rollout.version = 7
    spec = rollout.task_for([{"role": "user", "content": "Write digits."}], 4)
    assert spec.instruction == "Write digits." and spec.num_sessions == 4
    assert spec.policy_version == 7 and spec.task_id.startswith("digits-")


def test_rollout_samples_are_trls_own_dataclass_filled_from_the_traces() -> None:
    from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

    traced = [trace("t0", "s0", 0, 100), trace("t1", "s1", 0, 200), trace("t2", "s2", 0, 300)]
    advantages = {"t0": 1.0, "t1": -1.0, "t2": None}  # t2: an unscored session
    samples = rollout_samples(
        traced, advantages, group_id=9, model_version=3, prompt=[], weight=0.5
    )
    assert [type(s) for s in samples] == [RolloutSample, RolloutSample]
    first = samples[0]
    assert first.input_ids.tolist() == [100, 101, 110, 111, 112]
    assert first.completion_mask.tolist() == [0, 0, 1, 0, 1]
    assert first.old_log_probs.tolist() == [0.0, 0.0, -0.5, 0.0, -1.25]
    assert [s.advantage for s in samples] == [0.5, -0.5]
    assert (first.model_version, first.group_id, first.metrics["reward"]) == (3, 9, 0.5)


def test_streamed_weights_replace_the_served_checkpoints_tensors(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    save_file({"a": torch.zeros(2), "b": torch.ones(3)}, str(tmp_path / "model.safetensors"))
    assert write_safetensors(tmp_path, iter([("a", torch.full((2,), 7.0, dtype=torch.float64))]))
    state = load_file(tmp_path / "model.safetensors")
    assert state["a"].tolist() == [7.0, 7.0] and state["a"].dtype == torch.float32
    assert state["b"].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="shape"):
        write_safetensors(tmp_path, iter([("b", torch.zeros(4))]))


def test_the_workers_health_check_fails_when_polar_cannot_produce() -> None:
    from polar.settings import Settings
    from polar.trainers.trl import PolarRolloutWorker
    from polar.trainers.trl.loop_thread import LoopThread

    nowhere = Settings(temporal_address="127.0.0.1:1")  # nothing listens there
    worker = PolarRolloutWorker(TEMPLATE, settings=nowhere, group_size=2)
    with pytest.raises(RuntimeError, match="not running"):
        worker.check_health(stale_after_s=60)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while worker._failure is None and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(RuntimeError, match="failed") as failed:
            worker.check_health(stale_after_s=60)
        assert "connect" in str(failed.value.__cause__)
    finally:
        worker.stop()
    # running, nothing failed, but no group handed over for longer than TRL allows
    idle = PolarRolloutWorker(TEMPLATE, settings=nowhere, group_size=2)
    idle._loop = LoopThread()
    try:
        idle.check_health(stale_after_s=60)
        idle._last_progress -= 120
        with pytest.raises(RuntimeError, match="no group for"):
            idle.check_health(stale_after_s=60)
    finally:
        idle.stop()
    with pytest.raises(ValueError, match="group_size"):
        PolarRolloutWorker(TEMPLATE, group_size=1)
    with pytest.raises(ValueError, match="stale"):
        PolarRolloutWorker(TEMPLATE, stale="ignore")  # type: ignore[arg-type]


async def test_the_worker_stops_on_a_group_with_no_scored_session() -> None:
    worker = PolarRolloutWorker(TEMPLATE, group_size=3, extra_sessions=1)
    result = TaskResult(
        task_id="digits-1",
        sessions=[failed(f"s{i}", i) for i in range(3)]
        + [session("s3", 3, SessionStatus.CANCELLED, None)],
        policy_version=0,
    )
    with pytest.raises(UnscoredBatch) as raised:
        await worker._hand_over(None, result, "wf-1")  # type: ignore[arg-type]  # loads nothing
    assert "Polar task wf-1: 0 of 3 sessions scored" in str(raised.value)
    assert worker.counts.left_out_sessions == {"task_error": 3, "cancelled": 1}
    assert worker.counts.left_out_examples["task_error"] == PREPARE_FAILED
    assert worker.rollout_buffer.empty()
    # the producer's failure reaches TRL's loop as itself
    worker._failure = raised.value
    with pytest.raises(UnscoredBatch):
        worker.check_health(stale_after_s=60)
    # 2 of the 3 asked scored: enough by default, not under min_scored 1.0
    two = result.model_copy(
        update={
            "sessions": [
                session("a", 0, SessionStatus.COMPLETED, 1.0),
                session("b", 1, SessionStatus.COMPLETED, 0.0),
                failed("c", 2),
            ]
        }
    )
    strict = PolarRolloutWorker(TEMPLATE, group_size=3, min_scored=1.0)
    with pytest.raises(UnscoredBatch, match="2 of 3 sessions scored"):
        await strict._hand_over(None, two, "wf-2")  # type: ignore[arg-type]

"""TRL 1.16's own GRPOTrainer trains through Polar's rollout function, on the real stack.

Two optimizer steps of `trl.GRPOTrainer` (its batching, advantages, loss and AdamW step) with
`PolarRolloutFunc` on the tiny model: each step's group is one Polar task of 3 sessions of the
GRPO example's 2-turn agent in the sealed local sandbox, through the gateway, a recording tap and
the real vLLM (in-place weight reload on, serving an untied copy of the model). The second
step's task was submitted before the first step (prefetch) and the weights were synced between.

What TRL held in its own batch (`_generate_and_score_completions`) must be Polar's chains,
token for token: every trained token (TRL's completion mask × env mask) is a token vLLM
sampled (the tap) with its logprob (as TRL's float32), and the rewards TRL logged and the
policy versions are the sessions'. The trainer's weights go into a folder of its own, from
which vLLM reloads them: the folder vLLM serves is never written.

A run whose every session fails (a task whose prepare step fails: `task_error`) raises
`UnscoredBatch` out of TRL's own `GRPOTrainer.train()` before any step, naming the outcome.

The TRL page's GRPO example runs as written against the same stack, in a process of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import os
import secrets
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from activities.worker import running_workers
from app.devstack import DevStack
from examples.grpo.train import untied_copy
from examples.trl.train import digits_task, make_trainer
from polar.advantages import trace_advantages
from polar.client.sdk import PolarClient
from polar.settings import Settings
from polar.tasks.sources import CommandAction
from polar.trainers._sessions import UnscoredBatch, absent_reason, chains, trainable
from polar.trainers.trl import PolarRolloutFunc, PolarRolloutWorker, PolarWeightTransfer
from polar.trainers.weights import InPlaceReload
from tests.conftest import open_for_harness
from tests.support.doc_blocks import REPO, doc_block
from tests.support.ports import free_port
from tests.support.scripted_backend import serve_app
from tests.support.tap import Tap, tap_app
from tests.system.trainer_checks import assert_sampled_by_vllm, float32, masked, run_logged

pytestmark = pytest.mark.slow
GROUP = 3


@pytest.fixture(scope="module")
def trl_stack(
    devstack: DevStack, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Tap]]:
    """Its own vLLM (weight reload on) serving an untied copy of the model, a tap in front of
    it and a gateway forwarding through the tap."""
    served_dir = open_for_harness(tmp_path_factory.mktemp("trl"), tmp_path_factory) / "served"
    untied_copy(model_dir, served_dir)
    port = free_port(span=3)
    tap = Tap(upstream=f"http://127.0.0.1:{port}/v1")
    settings = devstack.settings.model_copy(
        update={
            "model_dir": served_dir,
            "vllm_port": port,
            "vllm_weight_reload": True,
            "vllm_python": model_dir.parents[2] / ".venv-vllm" / "bin" / "python",
            "gateway_port": port + 1,
            "admin_port": port + 2,
            "admin_token": secrets.token_urlsafe(24),
            "task_queue": f"polar-trl-{uuid.uuid4().hex[:6]}",
            "data_dir": served_dir.parent / "data",
        }
    )
    stack = DevStack(settings, workers=0, die_with_parent=True)
    stack.start(stack.vllm())
    with serve_app(tap_app(tap)) as url:
        tap.url = f"{url}/v1"
        settings = settings.model_copy(update={"upstream_urls": tap.url})
        stack = DevStack(settings, workers=0, die_with_parent=True)
        stack.start(stack.gateway())
        yield settings, tap
        stack.stop("gateway", quiet=True)
    stack.stop("vllm", quiet=True)


@pytest.fixture(scope="module")
async def trl_polar(trl_stack: tuple[Settings, Tap]) -> AsyncIterator[PolarClient]:
    settings, _ = trl_stack
    async with running_workers(settings):
        yield await PolarClient.connect(settings)


async def test_grpo_trainer_trains_on_polar_tokens_for_two_steps(
    trl_polar: PolarClient, trl_stack: tuple[Settings, Tap], tmp_path: Path
) -> None:
    settings, tap = trl_stack
    polar = trl_polar
    assert settings.model_dir is not None
    served_dir, policy_dir = settings.model_dir, tmp_path / "policy"
    before = (served_dir / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match="the folder vLLM serves"):
        InPlaceReload.from_settings(settings, served_dir)  # a sync would overwrite the model
    vllm = [f"http://127.0.0.1:{settings.vllm_port}"]
    with pytest.raises(ValueError, match="the folder vLLM serves"):  # vLLM's own /v1/models
        InPlaceReload(served_dir, vllm, [], "unused").check_not_served()
    rollout = PolarRolloutFunc(
        digits_task(GROUP, served_dir),
        settings=settings,
        weights=InPlaceReload.from_settings(settings, policy_dir),
        max_staleness=1,
    )
    trainer = make_trainer(
        served_dir,
        rollout,
        steps=2,
        group_size=GROUP,
        groups_per_step=1,
        lr=1e-2,
        output_dir=tmp_path / "trl-out",
    )
    returned: list[dict[str, Any]] = []
    batches: list[dict[str, Any]] = []

    def recording(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        out = rollout(prompts, trainer)
        returned.append(out)
        return out

    generate = trainer._generate_and_score_completions

    def generate_and_keep(inputs: list[dict[str, Any]]) -> dict[str, Any]:
        batch = generate(inputs)
        batches.append(batch)
        return batch

    trainer.rollout_func = recording
    trainer._generate_and_score_completions = generate_and_keep
    try:
        await asyncio.to_thread(trainer.train)
    finally:
        await asyncio.to_thread(rollout.close)

    # two steps, one group of GROUP sessions each, one weight sync between them
    assert trainer.state.global_step == 2
    assert len(returned) == len(batches) == 2
    assert rollout.stats.syncs == 1 and rollout.version == 1
    assert (served_dir / "model.safetensors").read_bytes() == before  # never written
    assert (policy_dir / "model.safetensors").read_bytes() != before
    # the second step took the task prefetched at version 0, before the first step
    assert rollout.stats.prefetch_used == 1 and rollout.stats.prefetch_dropped == 0
    losses = [h for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2

    compared = 0
    for step, (out, batch) in enumerate(zip(returned, batches, strict=True)):
        assert len(out["completion_ids"]) == GROUP
        (workflow_id,) = set(out["polar_workflow_id"])
        result = await polar.wait(workflow_id)
        assert result.policy_version == 0  # step 0's task, and step 1's prefetched one
        sessions = {s.session_id: s for s in result.sessions}
        assert list(out["polar_session_id"]) == [
            s.session_id for s in sorted(result.sessions, key=lambda s: s.index)
        ]
        loss_mask = batch["completion_mask"] * batch["tool_mask"]
        for i, session_id in enumerate(out["polar_session_id"]):
            session = sessions[session_id]
            assert session.reward is not None, session  # every session graded here
            chain = chains(polar.load_traces(session))[0]
            # what the rollout function returned is Polar's first chain, exactly
            assert out["polar_trace_id"][i] == chain.trace_id
            assert out["prompt_ids"][i] == chain.prompt_ids
            assert out["completion_ids"][i] == chain.response_ids
            assert out["logprobs"][i] == chain.response_logprobs
            assert out["env_mask"][i] == chain.loss_mask
            # and what TRL trained on: its own padded tensors, under its own loss mask
            n = len(chain.response_ids)
            ids = batch["completion_ids"][i].tolist()
            mask = loss_mask[i].tolist()
            assert ids[:n] == chain.response_ids and not any(mask[n:])
            assert mask[:n] == chain.loss_mask
            sampled = batch["sampling_per_token_logps"][i].tolist()[:n]
            assert masked(sampled, mask[:n]) == masked(float32(chain.response_logprobs), mask[:n])
            compared += assert_sampled_by_vllm(chain, polar.storage, tap)
            # the reward and version are the session's
            assert out["polar_reward"][i] == session.reward == chain.reward
            assert session.outcome is not None
            assert out["polar_outcome"][i] == session.outcome.label
            assert out["polar_left_out"][i] is None
            assert out["polar_policy_version"][i] == chain.provenance.policy_version == 0
            assert out["polar_staleness"][i] == step  # sampled at 0, trained at version `step`
            assert out["polar_left_out_tokens"][i] == sum(
                sum(t.loss_mask) for t in chains(polar.load_traces(session))[1:]
            )
        # TRL's logged reward is the mean of Polar's session rewards
        rewards = [sessions[sid].reward or 0.0 for sid in out["polar_session_id"]]
        assert losses[step]["reward"] == pytest.approx(statistics.fmean(rewards), abs=1e-5)
    assert compared > 0
    print(
        f"trl: 2 GRPOTrainer steps, {compared} trained tokens compared with vLLM's samples, "
        f"rollout wait {rollout.stats.wait_s:.1f} s, sync {rollout.stats.sync_s:.1f} s"
    )


def worker_for(settings: Settings, **options: Any) -> PolarRolloutWorker:
    """A rollout worker of the digits task, one group of GROUP sessions in flight."""
    assert settings.model_dir is not None
    task = digits_task(GROUP, settings.model_dir)
    return PolarRolloutWorker(task, settings=settings, group_size=GROUP, max_in_flight=1, **options)


def protocol_members(protocol: type) -> tuple[set[str], dict[str, inspect.Signature]]:
    """A TRL protocol's attributes and its methods' signatures (as TRL declares them)."""
    attributes = set(getattr(protocol, "__annotations__", {}))
    methods = {
        name: inspect.signature(value)
        for name, value in vars(protocol).items()
        if callable(value) and not name.startswith("_")
    }
    return attributes, methods


def assert_implements(obj: object, protocol: type) -> None:
    """`obj` has every attribute of TRL's `protocol` and every method, with its parameters;
    and `isinstance` holds for a runtime-checkable copy of the protocol."""
    attributes, methods = protocol_members(protocol)
    assert attributes or methods
    for name in attributes:
        assert hasattr(obj, name), f"{type(obj).__name__} lacks {protocol.__name__}.{name}"
    for name, declared in methods.items():
        ours = inspect.signature(getattr(obj, name))
        theirs = [p for p in declared.parameters if p != "self"]
        assert list(ours.parameters) == theirs, f"{name}{ours} is not {protocol.__name__}'s"
    checkable = runtime_checkable(type(protocol.__name__, (protocol, Protocol), {}))
    assert isinstance(obj, checkable)


async def test_async_worker_hands_trl_rollout_samples_built_from_polar_traces(
    trl_polar: PolarClient, trl_stack: tuple[Settings, Tap], tmp_path: Path
) -> None:
    """TRL's AsyncGRPOTrainer cannot run on a CPU (torch.cuda in its init, flash-attention
    kernels from the Hub), so its rollout worker and weight transfer are checked against TRL's
    own protocols and `RolloutSample`, with samples from real Polar sessions."""
    from trl.experimental.async_grpo.async_grpo_trainer import (
        RolloutWorkerProtocol,
        WeightTransferProtocol,
    )
    from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

    settings, tap = trl_stack
    polar = trl_polar
    assert settings.model_dir is not None
    served_dir, policy_dir = settings.model_dir, tmp_path / "policy"
    # 4 sessions a group; it is handed over once 3 are usable (the 4th: cancelled, counted)
    worker = worker_for(settings, extra_sessions=1, max_staleness=1, filter_zero_spread=False)
    transfer = PolarWeightTransfer(InPlaceReload.from_settings(settings, policy_dir))
    assert_implements(worker, RolloutWorkerProtocol)
    assert_implements(transfer, WeightTransferProtocol)

    worker.update_model_version(4)
    worker.start()
    try:
        deadline = time.monotonic() + 400
        while worker.counts.groups < 1:
            assert time.monotonic() < deadline, worker.counts
            worker.check_health(stale_after_s=400)
            await asyncio.sleep(1)
        (handed, *_) = worker.handed
    finally:
        await asyncio.to_thread(worker.stop)
    samples = []
    while len(samples) < handed["samples"]:
        samples.append(worker.rollout_buffer.get(timeout=5))
    assert samples and all(isinstance(s, RolloutSample) for s in samples)
    fields = {f.name for f in dataclasses.fields(RolloutSample)}
    assert fields == {
        "prompt",
        "completion",
        "input_ids",
        "completion_mask",
        "old_log_probs",
        "advantage",
        "model_version",
        "group_id",
        "metrics",
        "enqueued_at",
    }

    # the samples are the traces of the task's trainable sessions, as Polar stored them
    result = await polar.wait(handed["workflow_id"])
    assert result.policy_version == 4
    usable = [s for s in result.sessions if trainable(s)]
    assert len(usable) >= GROUP
    left_out = Counter(absent_reason(s) for s in result.sessions if not trainable(s))
    assert worker.counts.left_out_sessions == left_out  # e.g. the cancelled straggler
    traces = [t for s in usable for t in polar.load_traces(s)]
    rewards = {s.session_id: s.reward for s in usable}
    advantages = trace_advantages(traces, rewards)
    assert len(samples) == sum(1 for t in traces if any(t.loss_mask))
    compared = 0
    for sample, trace in zip(samples, chains(traces), strict=True):
        assert sample.input_ids.dtype == np.int64 and sample.completion_mask.dtype == np.int64
        assert sample.old_log_probs.dtype == np.float32
        context = len(trace.prompt_ids)
        assert sample.input_ids.tolist() == trace.prompt_ids + trace.response_ids
        assert sample.completion_mask.tolist() == [0] * context + trace.loss_mask
        assert sample.old_log_probs.tolist() == float32([0.0] * context + trace.response_logprobs)
        assert sample.advantage == pytest.approx(advantages[trace.trace_id])
        assert sample.model_version == 4 and sample.group_id == handed["group_id"]
        assert sample.metrics["reward"] == trace.reward
        compared += assert_sampled_by_vllm(trace, polar.storage, tap)
    assert compared > 0
    metrics = worker.metrics_queue.get_nowait()
    assert metrics["polar/groups_total"] == 1.0 and metrics["polar/staleness"] == 0.0
    assert metrics["polar/sessions_per_s"] > 0 and "polar/stage_s/run" in metrics
    assert metrics["polar/mean_reward"] == pytest.approx(
        statistics.fmean(r for r in rewards.values() if r is not None)
    )

    # the same finished group, handed over again by workers whose trainer moved on
    stale = worker_for(settings, max_staleness=1, filter_zero_spread=False)
    stale.update_model_version(6)  # 2 versions past the group's 4
    await stale._hand_over(polar, result, handed["workflow_id"])
    assert stale.counts.dropped_stale_groups == 1 and stale.rollout_buffer.empty()
    weighted = worker_for(
        settings, max_staleness=1, stale="downweight", stale_weight=0.5, filter_zero_spread=False
    )
    weighted.update_model_version(7)  # 3 versions: 2 past the bound, advantage × 0.25
    await weighted._hand_over(polar, result, handed["workflow_id"])
    kept = [weighted.rollout_buffer.get_nowait() for _ in range(len(samples))]
    assert [s.advantage for s in kept] == pytest.approx([0.25 * s.advantage for s in samples])
    assert weighted.counts.downweighted_samples == len(samples)
    # no reward spread: filtered, counted
    flat = result.model_copy(
        update={"sessions": [s.model_copy(update={"reward": 0.5}) for s in result.sessions]}
    )
    spread = worker_for(settings, max_staleness=1)
    spread.update_model_version(4)
    await spread._hand_over(polar, flat, handed["workflow_id"])
    assert spread.counts.filtered_zero_spread == 1 and spread.rollout_buffer.empty()

    # the weight transfer: TRL's (name, tensor) stream lands in the served vLLM
    model = AutoModelForCausalLM.from_pretrained(served_dir, dtype=torch.float32)
    with torch.no_grad():
        model.lm_head.weight.mul_(3.0)  # a policy vLLM has not served yet
    transfer.init_weight_transfer()
    transfer.pause()
    try:
        transfer.send_weights(iter(model.named_parameters()))
    finally:
        transfer.resume()
    transfer.destroy()
    assert transfer.sent == len(list(model.named_parameters()))
    prompt = samples[0].input_ids[: int(np.argmax(samples[0].completion_mask))].tolist()
    gap = served_logprob_gap(model, settings, prompt)
    assert gap < 1e-3, gap
    print(f"trl async: {len(samples)} samples, {compared} tokens compared; served gap {gap:.2e}")


def served_logprob_gap(model: Any, settings: Settings, prompt: list[int]) -> float:
    """Max |vLLM's logprob − `model`'s| over 8 tokens vLLM samples after `prompt`."""
    answer = httpx.post(
        f"http://127.0.0.1:{settings.vllm_port}/v1/completions",
        json={
            "model": settings.upstream_model or "policy",
            "prompt": prompt,
            "max_tokens": 8,
            "temperature": 1.0,
            "logprobs": 0,
            "return_token_ids": True,
        },
        timeout=120,
    )
    answer.raise_for_status()
    choice = answer.json()["choices"][0]
    sampled, served = choice["token_ids"], choice["logprobs"]["token_logprobs"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sampled])).logits[0, len(prompt) - 1 : -1]
    ours = torch.log_softmax(logits, -1).gather(1, torch.tensor(sampled)[:, None])[:, 0]
    return max(abs(float(a) - float(b)) for a, b in zip(ours, served, strict=True))


async def test_a_trl_run_whose_every_session_fails_raises_out_of_trls_train(
    trl_polar: PolarClient, trl_stack: tuple[Settings, Tap], tmp_path: Path
) -> None:
    """Every session's prepare step fails (`task_error`): TRL's own `GRPOTrainer.train()`
    raises `UnscoredBatch` at its first batch, with the outcome and its detail, and takes no
    step (it once trained 3 steps with loss 0 and exited 0)."""
    settings, _ = trl_stack
    assert settings.model_dir is not None
    task = digits_task(GROUP, settings.model_dir)
    task.runtime.prepare.append(CommandAction(command="echo no dataset here >&2; exit 3"))
    rollout = PolarRolloutFunc(task, settings=settings, weights=None, prefetch=False)
    trainer = make_trainer(
        settings.model_dir,
        rollout,
        steps=2,
        group_size=GROUP,
        groups_per_step=1,
        lr=1e-2,
        output_dir=tmp_path / "trl-out",
    )
    try:
        with pytest.raises(UnscoredBatch) as raised:
            await asyncio.to_thread(trainer.train)
    finally:
        await asyncio.to_thread(rollout.close)
    message = str(raised.value)
    assert f"0 of {GROUP} sessions scored (min_scored 0.0)" in message, message
    assert f"{GROUP} × task_error (prepare: " in message, message
    assert raised.value.labels == {"task_error": GROUP}
    assert trainer.state.global_step == 0 and rollout.version == 0
    assert rollout.stats.unscored_reasons == {"task_error": GROUP}
    print(f"trl: every session failed, train() raised: {message[:200]}")


async def test_the_trl_pages_grpo_example_runs_as_written(
    trl_polar: PolarClient, trl_stack: tuple[Settings, Tap], tmp_path: Path
) -> None:
    """The TRL page's `trl grpo` block, as written, in a process of its own against this
    module's stack (`polar dev up` with POLAR_VLLM_WEIGHT_RELOAD=1, the page's `trl dev up`
    block: vLLM reloading weights in place, the gateway taking the admin token), from a folder
    holding the checkout's examples/: TRL's GRPOTrainer takes its two steps on the demo task,
    syncs the weights once into `runs/policy`, and the folder vLLM serves stays as it was."""
    settings, _ = trl_stack
    assert settings.model_dir is not None and settings.admin_token
    up = doc_block("trl dev up", "bash")
    assert "POLAR_VLLM_WEIGHT_RELOAD=1 polar dev up" in up and "POLAR_ADMIN_TOKEN" in up
    (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / "grpo.py").write_text(
        doc_block("trl grpo", "python")
        + "\nprint('POLAR_TRL', trainer.state.global_step, rollout.version, rollout.stats.syncs)\n"
    )
    before = (settings.model_dir / "model.safetensors").read_bytes()
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLAR_")}
    env |= settings.as_env() | {"PYTHONPATH": str(REPO)}
    out = await run_logged([sys.executable, "grpo.py"], env, timeout_s=500, cwd=tmp_path)
    (line,) = [line for line in out.splitlines() if line.startswith("POLAR_TRL ")]
    assert line.split()[1:] == ["2", "1", "1"], out[-3000:]  # steps, version, syncs
    assert (tmp_path / "runs" / "policy" / "model.safetensors").stat().st_size > 0
    assert (settings.model_dir / "model.safetensors").read_bytes() == before
    print(f"trl page: {line}")

"""TRL 1.16's own GRPOTrainer trains through Polar's rollout function, on the real stack.

Two optimizer steps of `trl.GRPOTrainer` (its batching, advantages, loss and AdamW step) with
`PolarRolloutFunc` on the tiny model: each step's group is one Polar task of 3 sessions of the
GRPO example's 2-turn agent in the sealed local sandbox, through the gateway, a recording tap and
the real vLLM (in-place weight reload on, serving an untied copy of the model). The second
step's task was submitted before the first step (prefetch) and the weights were synced between.

What TRL held in its own batch (`_generate_and_score_completions`) must be Polar's chains,
token for token: every trained token (TRL's completion mask × env mask) is a token vLLM
sampled (the tap) with its logprob (as TRL's float32), and the rewards TRL logged and the
policy versions are the sessions'.
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.worker import running_workers
from examples.grpo.train import untied_copy
from examples.trl.train import digits_task, make_trainer
from polar.app.devstack import DevStack, free_port
from polar.client.sdk import PolarClient
from polar.settings import Settings
from polar.trainers._sessions import chains
from polar.trainers.trl import PolarRolloutFunc
from polar.trainers.weights import InPlaceReload
from tests.conftest import open_for_harness
from tests.support.scripted_backend import serve_app
from tests.support.tap import Tap, tap_app
from tests.system.trainer_checks import assert_sampled_by_vllm, float32, masked

pytestmark = pytest.mark.slow
GROUP = 3


@pytest.fixture(scope="module")
def trl_stack(
    devstack: DevStack, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Tap]]:
    """Its own vLLM (weight reload on) serving a writable untied copy of the model, a tap in
    front of it and a gateway forwarding through the tap."""
    policy_dir = open_for_harness(tmp_path_factory.mktemp("trl"), tmp_path_factory) / "policy"
    untied_copy(model_dir, policy_dir)
    port = free_port(span=3)
    tap = Tap(upstream=f"http://127.0.0.1:{port}/v1")
    settings = devstack.settings.model_copy(
        update={
            "model_dir": policy_dir,
            "vllm_port": port,
            "vllm_weight_reload": True,
            "vllm_python": model_dir.parents[2] / ".venv-vllm" / "bin" / "python",
            "gateway_port": port + 1,
            "admin_port": port + 2,
            "admin_token": secrets.token_urlsafe(24),
            "task_queue": f"polar-trl-{uuid.uuid4().hex[:6]}",
            "data_dir": policy_dir.parent / "data",
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
    policy_dir = settings.model_dir
    before = (policy_dir / "model.safetensors").read_bytes()
    rollout = PolarRolloutFunc(
        digits_task(GROUP, policy_dir),
        settings=settings,
        weights=InPlaceReload.from_settings(settings, policy_dir),
        max_staleness=1,
    )
    trainer = make_trainer(
        policy_dir,
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

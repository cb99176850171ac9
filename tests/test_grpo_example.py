"""The GRPO example end to end: real vLLM, gateway pause, in-place weight sync, real updates.

The sharpest check is token fidelity across a weight update: after each sync
the trainer's own log-probabilities of the tokens vLLM samples must equal the
ones vLLM reported, which only holds if vLLM really serves the updated weights.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from activities.worker import running_workers
from examples.grpo.train import group_advantages, train
from polar.devstack import DevStack, free_port
from polar.sdk import PolarClient
from polar.settings import Settings
from tests.conftest import open_for_harness

pytestmark = pytest.mark.slow
ADMIN = "grpo-admin"


@pytest.fixture(scope="module")
def grpo_settings(
    devstack: DevStack, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """Its own vLLM (weight reload on) serving a writable copy of the model, and gateway."""
    # the data dir holds local runtimes: reachable by their unprivileged harness user
    policy_dir = open_for_harness(tmp_path_factory.mktemp("grpo"), tmp_path_factory) / "policy"
    shutil.copytree(model_dir, policy_dir)
    port = free_port(span=3)
    settings = devstack.settings.model_copy(
        update={
            "model_dir": policy_dir,
            "vllm_port": port,
            "vllm_weight_reload": True,
            "vllm_python": model_dir.parents[2] / ".venv-vllm" / "bin" / "python",
            "upstream_urls": f"http://127.0.0.1:{port}/v1",
            "gateway_port": port + 1,
            "admin_port": port + 2,
            "admin_token": ADMIN,
            "task_queue": f"polar-grpo-{uuid.uuid4().hex[:6]}",
            "data_dir": policy_dir.parent / "data",
        }
    )
    stack = DevStack(settings, workers=0, die_with_parent=True)
    stack.start(stack.vllm())
    stack.start(stack.gateway())
    yield settings
    stack.stop("gateway", quiet=True)
    stack.stop("vllm", quiet=True)


@pytest.fixture(scope="module")
async def grpo_polar(grpo_settings: Settings) -> AsyncIterator[PolarClient]:
    async with running_workers(grpo_settings):
        yield await PolarClient.connect(grpo_settings)


def test_group_advantages_are_normalised_within_the_group() -> None:
    adv = group_advantages([1.0, 0.0, 0.5, 0.5])
    assert abs(sum(adv)) < 1e-9 and adv[0] > 0 > adv[1] and adv[2] == adv[3] == 0
    assert group_advantages([0.7, 0.7]) == [0.0, 0.0]  # no signal without spread


async def test_grpo_loop_updates_the_served_policy(
    grpo_polar: PolarClient, grpo_settings: Settings
) -> None:
    assert grpo_settings.model_dir is not None
    before = (grpo_settings.model_dir / "model.safetensors").read_bytes()
    reports = await train(
        grpo_polar,
        policy_dir=grpo_settings.model_dir,
        vllm_url=f"http://127.0.0.1:{grpo_settings.vllm_port}",
        admin_token=ADMIN,
        steps=2,
        tasks_per_step=2,
        group_size=3,
    )
    assert [r.policy_version for r in reports] == [0, 1]
    for report in reports:
        assert report.groups == 2 and report.traces >= 6 and report.trained_tokens > 0
        assert 0.0 <= report.mean_reward <= 1.0
        # the trainer scores vLLM's samples exactly: before the first update (same
        # weights) and after the sync (vLLM reloaded the updated weights in place)
        assert report.max_logprob_gap < 1e-3, report
    assert (grpo_settings.model_dir / "model.safetensors").read_bytes() != before

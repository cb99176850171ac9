"""The GRPO example end to end: real vLLM, gateway pause, in-place weight sync, real updates.

The sharpest check is token fidelity across a weight update: after each sync
the trainer's own log-probabilities of the tokens vLLM samples must equal the
ones vLLM reported, which only holds if vLLM really serves the updated weights.
"""

from __future__ import annotations

import secrets
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from activities.worker import running_workers
from app.devstack import DevStack
from examples.grpo.curve import plot, read_csv, write_csv
from examples.grpo.train import Batch, StepReport, add_group, split_by_lag, train
from polar.client.sdk import Group, PolarClient, TaskRun
from polar.contracts import SessionResult, TaskResult
from polar.records import SessionStatus, Trace, TraceProvenance
from polar.settings import Settings
from tests.conftest import open_for_harness
from tests.support.ports import free_port

pytestmark = pytest.mark.slow
ADMIN = secrets.token_urlsafe(24)  # the gateway refuses weak admin tokens


@pytest.fixture(scope="module")
def grpo_settings(
    devstack: DevStack, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """Its own vLLM (weight reload on) serving a copy of the model, and gateway."""
    # the data dir holds local runtimes: reachable by their unprivileged harness user
    served_dir = open_for_harness(tmp_path_factory.mktemp("grpo"), tmp_path_factory) / "served"
    shutil.copytree(model_dir, served_dir)
    port = free_port(span=3)
    settings = devstack.settings.model_copy(
        update={
            "model_dir": served_dir,
            "vllm_port": port,
            "vllm_weight_reload": True,
            "vllm_python": model_dir.parents[2] / ".venv-vllm" / "bin" / "python",
            "upstream_urls": f"http://127.0.0.1:{port}/v1",
            "gateway_port": port + 1,
            "admin_port": port + 2,
            "admin_token": ADMIN,
            "task_queue": f"polar-grpo-{uuid.uuid4().hex[:6]}",
            "data_dir": served_dir.parent / "data",
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


def trace(trace_id: str, session_id: str, version: int | None = 0) -> Trace:
    provenance = TraceProvenance(
        session_id=session_id,
        task_id="t",
        harness="command",
        builder="per_request",
        model="policy",
        completion_seqs=[0],
        record_ids=[trace_id],
        policy_version=version,
    )
    return Trace(
        trace_id=trace_id,
        prompt_ids=[1],
        response_ids=[2],
        loss_mask=[1],
        response_logprobs=[-1.0],
        provenance=provenance,
    )


def test_unscored_sessions_are_left_out_of_the_baseline_and_not_trained() -> None:
    outcomes = [
        ("a", SessionStatus.COMPLETED, 1.0),
        ("b", SessionStatus.TIMEOUT, 0.0),
        ("c", SessionStatus.ERROR, None),
    ]
    sessions = [
        SessionResult(
            session_id=sid, task_id="t", index=i, status=status, reward=reward, harness="command"
        )
        for i, (sid, status, reward) in enumerate(outcomes)
    ]
    group = Group(TaskRun("t", "w"), TaskResult(task_id="t", sessions=sessions, policy_version=0))
    traces = [trace("a1", "a"), trace("a2", "a"), trace("b1", "b"), trace("c1", "c")]
    batch = Batch()
    add_group(batch, group, traces)
    # baseline of the two scored sessions (mean 0.5, std 0.5): ±1; the errored one is
    # neither a 0-reward sample nor trained on
    assert {t.trace_id: round(a, 5) for t, a in batch.items} == {"a1": 1.0, "a2": 1.0, "b1": -1.0}
    assert batch.rewards == [1.0, 0.0] and batch.unscored_sessions == 1


def test_traces_past_the_allowed_policy_lag_are_stale() -> None:
    traces = [trace("v3", "s", 3), trace("v2", "s", 2), trace("v1", "s", 1), trace("x", "s", None)]
    fresh, stale = split_by_lag(traces, version=3, max_lag=1)
    assert [t.trace_id for t in fresh] == ["v3", "v2", "x"]
    assert [t.trace_id for t in stale] == ["v1"]
    fresh, stale = split_by_lag(traces, version=3, max_lag=0)
    assert [t.trace_id for t in stale] == ["v2", "v1"]


def test_the_curve_round_trips_through_its_csv(tmp_path: Path) -> None:
    reports = [
        StepReport(
            step=i,
            policy_version=i,
            groups=2,
            traces=12,
            trained_tokens=190,
            mean_reward=reward,
            reward_std=0.1,
            loss=-0.01,
            max_logprob_gap=gap,
            stale_groups_dropped=i,
            stale_traces_dropped=6 * i,
            unscored_sessions=0,
            failed_groups=0,
            seconds=20.5,
        )
        for i, (reward, gap) in enumerate([(0.01, 9.5e-7), (None, None), (0.93, 4.8e-7)])
    ]
    write_csv(reports, tmp_path / "reward.csv")
    assert read_csv(tmp_path / "reward.csv") == reports
    plot(reports, tmp_path / "reward.png")
    assert (tmp_path / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_grpo_loop_updates_the_served_policy(
    grpo_polar: PolarClient, grpo_settings: Settings, tmp_path: Path
) -> None:
    served_dir, policy_dir = grpo_settings.model_dir, tmp_path / "policy"
    assert served_dir is not None
    before = (served_dir / "model.safetensors").read_bytes()
    reports = await train(
        grpo_polar,
        policy_dir=policy_dir,
        model_dir=served_dir,
        vllm_url=f"http://127.0.0.1:{grpo_settings.vllm_port}",
        admin_token=ADMIN,
        steps=2,
        tasks_per_step=2,
        group_size=3,
        # step 1's groups are submitted at version 0, before step 0's update: one version
        # behind when step 1 takes them, past the allowed lag of 0, so dropped and replaced
        overlap=True,
        max_policy_lag=0,
    )
    assert [r.policy_version for r in reports] == [0, 1]
    assert reports[0].stale_groups_dropped == reports[0].stale_traces_dropped == 0
    # 2 groups × 3 sessions × 2 turns (one per_request trace per call)
    assert reports[1].stale_groups_dropped == 2 and reports[1].stale_traces_dropped == 12
    for report in reports:
        assert report.groups == 2 and report.traces == 12 and report.trained_tokens > 0
        assert report.failed_groups == report.unscored_sessions == 0
        assert report.mean_reward is not None and 0.0 <= report.mean_reward <= 1.0
        assert report.max_logprob_gap is not None
        # the trainer scores vLLM's samples exactly: before the first update (same
        # weights) and after the sync (vLLM reloaded the updated weights in place)
        assert report.max_logprob_gap < 1e-3, report
    # vLLM reloaded the trainer's folder; the folder it serves was never written
    assert (policy_dir / "model.safetensors").read_bytes() != before
    assert (served_dir / "model.safetensors").read_bytes() == before

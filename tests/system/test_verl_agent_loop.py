"""verl 0.9.1 takes Polar's sessions through its own agent-loop path (in .venv-trainers).

verl's Hydra trainer config, its agent-loop config file naming `polar` (the verl page's, as
written, with the task's path and a policy version filled in), its registry and its
`AgentLoopWorker.generate_sequences` run two rows; each row runs one Polar session on the real
stack (Temporal, S3, the gateway process, the real vLLM behind a recording tap). What verl holds
afterwards must be Polar's first chain of that session, token for token, with the sampled
logprobs (as verl's float32), the session's reward at the last token and the policy version.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.cli.demo import demo_task
from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.trainers._sessions import chains
from tests.support.doc_blocks import doc_block, filled
from tests.support.tap import Tap
from tests.system.trainer_checks import (
    REPO,
    assert_sampled_by_vllm,
    float32,
    run_logged,
    trainers_python,
)

pytestmark = pytest.mark.slow
VERSION = 3


async def test_verl_agent_loop_runs_polar_sessions_exact_to_the_token(
    devstack: DevStack,
    polar: PolarClient,
    gateway: str,
    tap: Tap,
    model_dir: Path,
    tmp_path: Path,
) -> None:
    python = trainers_python()
    spec = demo_task(sessions=1).model_copy(deep=True)
    spec.builder.name = "prefix_merging"
    task = tmp_path / "task.json"
    task.write_text(spec.model_dump_json())
    env = {**os.environ, **devstack.env(), "PYTHONPATH": str(REPO)}
    # the verl page's agent-loop config, the task and a version filled in as a user would
    loop_config = tmp_path / "agent_loop.yaml"
    version = {"policy_version: null": f"policy_version: {VERSION}"}
    loop_config.write_text(
        filled(
            doc_block("verl agent_loop.yaml", "yaml"), {"/path/to/task.json": str(task)} | version
        )
    )
    argv = [str(python), "-m", "tests.system.verl_driver", str(loop_config), str(tmp_path)]
    argv += ["--rows", "2", "--model", str(model_dir)]
    await run_logged(argv, env, timeout_s=500)
    report = json.loads((tmp_path / "verl_rows.json").read_text())

    # verl's own registry: @register put the class there; the config file's entry replaced it
    target = "polar.trainers.verl.PolarAgentLoop"
    assert report["registered"] == {"_target_": target}
    assert report["resolved"]["_target_"] == target and report["resolved"]["name"] == "polar"
    rows = report["rows"]
    assert len(rows) == 2
    assert len({row["polar"]["session_id"] for row in rows}) == 2
    compared = 0
    for row in rows:
        extra = row["polar"]
        result = await polar.wait(extra["workflow_id"])
        (session,) = result.sessions
        assert result.policy_version == VERSION
        ordered = chains(polar.load_traces(session))
        chain = ordered[0]
        assert extra["trace_id"] == chain.trace_id and extra["chains"] == len(ordered)
        assert extra["left_out_traces"] == [t.trace_id for t in ordered[1:]]
        assert extra["left_out_tokens"] == sum(sum(t.loss_mask) for t in ordered[1:])
        # what verl holds is Polar's chain, exactly
        assert row["prompt_ids"] == chain.prompt_ids
        assert row["response_ids"] == chain.response_ids
        assert row["input_ids_match"]
        assert row["response_mask"] == chain.loss_mask
        assert row["rollout_log_probs_dtype"] == "torch.float32"
        assert row["rollout_log_probs"] == float32(chain.response_logprobs)
        compared += assert_sampled_by_vllm(chain, polar.storage, tap)
        # the reward and version are the session's
        assert session.reward is not None and chain.reward == session.reward
        assert extra["session_reward"] == session.reward
        assert row["rm_score_last"] == float32([session.reward])[0]
        assert set(row["rm_scores_nonzero"]) <= {str(len(chain.response_ids) - 1)}
        assert chain.provenance.policy_version == VERSION
        assert row["min_global_steps"] == row["max_global_steps"] == VERSION
        assert row["num_turns"] == len(chain.provenance.record_ids)
        assert row["metrics"]["generate_sequences"] == session.stage_seconds.get("run", 0.0)
    assert compared > 0
    print(f"verl: 2 rows, {compared} sampled tokens compared, {report['seconds']:.1f} s")

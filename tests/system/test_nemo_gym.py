"""Polar is a NeMo Gym environment: Gym's own servers and rollout collection run Polar sessions.

In `.venv-gym` (nemo-gym 0.4.0, Python 3.12; scripts/setup_gym_venv.sh): Gym's `ng_run` starts
the head server and Polar's two servers from `polar/trainers/nemo_gym/configs/polar.yaml` (with
an overlay naming the task template and the policy version), and Gym's `ng_collect_rollouts`
posts two dataset rows to the agent's `/run` and writes the rollouts file. Each row runs one Polar
session on the real stack (Temporal, S3, the gateway process, the real vLLM behind a recording
tap). Every row written must carry, per model call, the token ids and logprobs Polar recorded,
equal to the session's traces (and to what vLLM sampled), with the session's reward (from the
resources server's /verify) and the policy version. A third row, whose sessions can never be
graded, is run twice and then goes to Gym's failures file, never to the rollouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from app.cli.demo import demo_task
from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.trainers._sessions import chains
from tests.support.ports import free_port
from tests.support.tap import Tap
from tests.system.trainer_checks import REPO, assert_sampled_by_vllm, masked, run_logged

pytestmark = pytest.mark.slow
VERSION = 5
GYM_DIR = REPO / "polar" / "trainers" / "nemo_gym"


def gym_bin() -> Path:
    """.venv-gym's bin dir, built (cached) by scripts/setup_gym_venv.sh."""
    script = REPO / "scripts" / "setup_gym_venv.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"setup_gym_venv failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1]).parent


def gym_workdir(tmp: Path) -> Path:
    """A working dir for Gym: links to the server dirs (Gym finds them under its cwd) and the
    config, so that Gym's own outputs land here, not in the checkout."""
    work = tmp / "gym"
    work.mkdir()
    for name in ("resources_servers", "responses_api_agents", "configs"):
        (work / name).symlink_to(GYM_DIR / name)
    return work


async def wait_ready(proc: asyncio.subprocess.Process, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "servers ready" in text:
            return
        if proc.returncode is not None:
            raise AssertionError(f"ng_run exited {proc.returncode}:\n{text[-4000:]}")
        await asyncio.sleep(2)
    raise AssertionError(f"Gym's servers not ready in {timeout_s}s:\n{log.read_text()[-4000:]}")


async def stop(proc: asyncio.subprocess.Process) -> None:
    """ng_run's own shutdown (SIGINT: it interrupts its servers and stops its Ray), then the
    process group it and its servers share, whatever is left of it."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


async def test_gym_rollout_collection_writes_polar_sessions_exact_to_the_token(
    devstack: DevStack,
    polar: PolarClient,
    gateway: str,
    tap: Tap,
    tmp_path: Path,
) -> None:
    bin_dir = gym_bin()
    spec = demo_task(sessions=1).model_copy(deep=True)
    spec.builder.name = "prefix_merging"
    template = tmp_path / "task.json"
    template.write_text(spec.model_dump_json())
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(
        "polar_agent:\n  responses_api_agents:\n    polar_agent:\n"
        f"      task: {template}\n      policy_version: {VERSION}\n"
    )
    rows = tmp_path / "rows.jsonl"
    user = {"role": "user", "content": spec.instruction}
    row_task = {"instruction": spec.instruction + " Keep it short."}
    # a row whose sessions can never train (no evaluator, no reward): Gym's failures file
    never = {"harness": {"kind": "command", "command": "true"}, "evaluator": {"kind": "none"}}
    rows.write_text(
        "".join(
            json.dumps({"responses_create_params": {"input": [user]}, **extra}) + "\n"
            for extra in ({}, {"polar_task": row_task}, {"polar_task": never})
        )
    )
    work = gym_workdir(tmp_path)
    port = free_port()
    head = ["+head_server.host=127.0.0.1", f"+head_server.port={port}"]
    env = {
        **os.environ,
        **devstack.env(),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # Ray on loopback only (a single-node cluster)
        "RAY_DISABLE_USAGE_STATS": "1",
    }
    env.pop("PYTHONPATH", None)
    log = tmp_path / "ng_run.log"
    run_argv = [
        str(bin_dir / "ng_run"),
        f"+config_paths=[configs/polar.yaml,{overlay}]",
        "+skip_venv_if_present=true",
        f"+uv_venv_dir={REPO / '.venv-gym' / 'gym-servers'}",
        *head,
    ]
    with log.open("wb") as out:
        server = await asyncio.create_subprocess_exec(
            *run_argv, cwd=work, env=env, stdout=out, stderr=out, start_new_session=True
        )
    started = time.monotonic()
    try:
        await wait_ready(server, log, timeout_s=300)
        rollouts = tmp_path / "rollouts.jsonl"
        collect = [
            str(bin_dir / "ng_collect_rollouts"),
            "+agent_name=polar_agent",
            f"+input_jsonl_fpath={rows}",
            f"+output_jsonl_fpath={rollouts}",
            "+num_samples_in_parallel=2",
            *head,
        ]
        await run_logged(collect, env, timeout_s=600, cwd=work)
        seconds = time.monotonic() - started
    finally:
        await stop(server)

    written = [json.loads(line) for line in rollouts.read_text().splitlines()]
    assert len(written) == 2, written
    (failed,) = [json.loads(line) for line in (tmp_path / "rollouts_failures.jsonl").open()]
    assert failed["_ng_failure_class"] == "polar_untrainable"
    reasons = failed["polar"]["reasons"]
    assert len(reasons) == 2 and all(r.endswith(": no reward") for r in reasons), reasons
    assert failed["response"]["output"] == []
    compared = 0
    for row in written:
        provenance = row["polar"]
        result = await polar.wait(provenance["workflow_id"])
        (session,) = result.sessions
        assert session.session_id == provenance["session_id"]
        assert result.policy_version == VERSION == provenance["policy_version"]
        # the grade is Polar's, through the resources server's /verify
        assert session.reward is not None and row["reward"] == session.reward
        assert provenance["graded_status"] == session.status.value
        # one assistant message per model call, in chain order, each with Polar's token ids
        ordered = chains(polar.load_traces(session))
        assert provenance["trace_ids"] == [t.trace_id for t in ordered]
        items = row["response"]["output"]
        records = {r.record_id: r for r in polar.storage.list_completions(session.session_id)}
        position = 0
        for trace in ordered:
            assert trace.provenance.policy_version == VERSION
            members = sorted(
                (records[rid] for rid in trace.provenance.record_ids), key=lambda r: r.seq
            )
            sampled: list[int] = []
            logprobs: list[float] = []
            for record in members:
                item = items[position]
                position += 1
                assert item["type"] == "message" and item["role"] == "assistant"
                assert item["id"] == f"msg_{record.record_id}"
                assert item["prompt_token_ids"] == record.prompt_token_ids
                assert item["generation_token_ids"] == record.response_token_ids
                assert item["generation_log_probs"] == record.response_logprobs  # bit for bit
                sampled += item["generation_token_ids"]
                logprobs += item["generation_log_probs"]
            # equal to the trace: its mask-1 tokens and logprobs, in order
            assert sampled == masked(trace.response_ids, trace.loss_mask)
            assert logprobs == masked(trace.response_logprobs, trace.loss_mask)
            assert trace.prompt_ids[: len(members[0].prompt_token_ids or [])] == (
                members[0].prompt_token_ids
            )
            compared += assert_sampled_by_vllm(trace, polar.storage, tap)
        assert position == len(items) > 0
        # Gym's own bookkeeping of the row
        assert row["agent_ref"] == {"name": "polar_agent"}
    assert compared > 0
    print(f"nemo-gym: 2 rows (+1 to failures), {compared} sampled tokens compared, {seconds:.1f} s")

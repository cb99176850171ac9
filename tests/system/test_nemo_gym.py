"""Polar is a NeMo Gym environment: Gym's own servers and rollout collection run Polar sessions.

In `.venv-gym` (nemo-gym 0.4.0, Python 3.12; scripts/setup_gym_venv.sh), the NeMo Gym page's
two blocks run as written (docs/trainers-nemo-gym.md: `gym servers`, `gym collect`; only the
paths a reader fills in, and a free head-server port, are put in): Gym's `ng_run` starts the
head server and Polar's two servers from `polar/trainers/nemo_gym/configs/polar.yaml` with the
page's overlay, and Gym's `ng_collect_rollouts` posts the page's row 4 times to the agent's
`/run` and writes the rollouts file. Each row runs one Polar session on the real stack
(Temporal, S3, the gateway process, the real vLLM behind a recording tap). Every row written
must carry, per model call, the token ids and logprobs Polar recorded, equal to the session's
traces (and to what vLLM sampled), with the session's reward (from the resources server's
/verify). A second collection adds a row whose sessions can never be graded: it is run twice
and then goes to Gym's failures file, never to the rollouts, with the reason it was left out,
and Gym's own aggregate leaves it out (it once counted it as reward 0.0). Ray, which Gym's
`ng_run` starts, listens on loopback only and keeps its files in the run's folder (the page's
`RAY_*` variables), and writes nothing under `~/.ray`. Ctrl-C (SIGINT to the terminal's
process group) stops `ng_run`, its servers and its Ray, in the time the page states.

`test_gyms_aggregate_leaves_polar_failure_rows_out` runs Polar's agent app and Gym's own
`compute_aggregate_metrics` in `.venv-gym` without the stack: failure rows out of the mean,
a collection with no scored row refused with the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from app.cli.demo import demo_task
from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.trainers._sessions import chains
from tests.support.doc_blocks import doc_block, filled
from tests.support.ports import free_port
from tests.support.tap import Tap
from tests.system.trainer_checks import REPO, assert_sampled_by_vllm, masked, run_logged

pytestmark = pytest.mark.slow
CTRL_C_S = 90.0
"""the longest Ctrl-C may take, as the page states (4.5 s measured on a quiet machine, 41 s
in the full suite: Ray's own shutdown under load)"""
GYM_DIR = REPO / "polar" / "trainers" / "nemo_gym"


def gym_bin() -> Path:
    """.venv-gym's bin dir, built (cached) by scripts/setup_gym_venv.sh."""
    script = REPO / "scripts" / "setup_gym_venv.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"setup_gym_venv failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1]).parent


def listening(session_id: int) -> set[str]:
    """The addresses TCP sockets of session `session_id`'s processes listen on (`ss`)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():
        for pid in map(int, re.findall(r"pid=(\d+)", line)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getsid(pid) == session_id:
                    found.add(line.split()[3].rsplit(":", 1)[0])
    return found


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


async def ctrl_c(proc: asyncio.subprocess.Process) -> float:
    """Ctrl-C in ng_run's terminal (SIGINT to its process group: ng_run, its servers, Ray);
    the seconds until the terminal's shell is back (ng_run's own shutdown is over)."""
    started = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), 120)
    return time.monotonic() - started


async def stop(proc: asyncio.subprocess.Process) -> None:
    """Whatever is left of the process group ng_run and its servers share."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


def page_blocks(run: Path, task: Path, port: int) -> tuple[str, str]:
    """The NeMo Gym page's `gym servers` and `gym collect` blocks, with the paths a reader
    fills in put in, and the head server on `port`."""
    paths = {"/path/to/polar-checkout": str(REPO), "/tmp/gym-run": str(run)}
    head = {"+head_server.host=127.0.0.1": f"+head_server.host=127.0.0.1 +head_server.port={port}"}
    servers = filled(doc_block("gym servers", "bash"), paths | {"/path/to/task.json": str(task)})
    collect = filled(doc_block("gym collect", "bash"), paths)
    return filled(servers, head), filled(collect, head)


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
    # a short folder: Ray's socket paths live under it (at most 107 bytes)
    run = Path(tempfile.mkdtemp(prefix="gym-", dir="/tmp"))
    port = free_port()
    servers, collect = page_blocks(run, template, port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLAR_")}
    env |= devstack.env()
    env.pop("PYTHONPATH", None)
    home_ray = Path.home() / ".ray"
    home_before = sorted(home_ray.iterdir()) if home_ray.exists() else None
    log = tmp_path / "ng_run.log"
    with log.open("wb") as out:  # the first terminal: a session of its own
        server = await asyncio.create_subprocess_exec(
            "bash", "-ec", servers, env=env, stdout=out, stderr=out, start_new_session=True
        )
    started = time.monotonic()
    stop_s = None
    try:
        await wait_ready(server, log, timeout_s=300)
        # Ray and Gym's servers: every listening socket on loopback; Ray's files in its folder
        addresses = listening(os.getsid(server.pid))
        assert addresses, "no listening socket found for ng_run's session"
        assert addresses <= {"127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"}, addresses
        assert list((run / "ray").glob("ray/session_*")), "Ray wrote elsewhere"
        # the second terminal: the page's collection, then one with a row never graded
        await run_logged(["bash", "-ec", collect], env, timeout_s=600, cwd=tmp_path)
        rows = run / "more.jsonl"
        user = {"role": "user", "content": spec.instruction}
        row_task = {"instruction": spec.instruction + " Keep it short."}
        never = {"harness": {"kind": "command", "command": "true"}, "evaluator": {"kind": "none"}}
        rows.write_text(
            "".join(
                json.dumps({"responses_create_params": {"input": [user]}, "polar_task": task})
                + "\n"
                for task in (row_task, never)
            )
        )
        more = [
            str(bin_dir / "ng_collect_rollouts"),
            "+agent_name=polar_agent",
            f"+input_jsonl_fpath={rows}",
            f"+output_jsonl_fpath={run / 'more.out.jsonl'}",
            "+head_server.host=127.0.0.1",
            f"+head_server.port={port}",
        ]
        await run_logged(more, env | {"PATH": f"{bin_dir}:{env['PATH']}"}, 600, cwd=run)
        seconds = time.monotonic() - started
        stop_s = await ctrl_c(server)
    finally:
        await stop(server)
        shutil.rmtree(run / "ray", ignore_errors=True)
    assert (sorted(home_ray.iterdir()) if home_ray.exists() else None) == home_before
    assert stop_s is not None and stop_s < CTRL_C_S, (
        f"Ctrl-C took {stop_s:.1f} s:\n{log.read_text(errors='replace')[-3000:]}"
    )

    # the page's row, 4 times: 4 sessions, each scored
    written = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(written) == 4, written
    failures = run / "rollouts_failures.jsonl"
    assert not failures.exists() or not failures.read_text().strip()
    (aggregate,) = json.loads((run / "rollouts_aggregate_metrics.json").read_text())
    mean = statistics.fmean(r["reward"] for r in written)
    assert aggregate["agent_metrics"]["mean/reward"] == pytest.approx(mean)
    # the second collection: one scored row, and the row never graded in Gym's failures file
    (scored,) = [json.loads(line) for line in (run / "more.out.jsonl").open()]
    (failed,) = [json.loads(line) for line in (run / "more.out_failures.jsonl").open()]
    assert failed["_ng_failure_class"] == "polar_untrainable"
    reasons = failed["polar"]["reasons"]
    assert len(reasons) == 2 and all(r.endswith(": no reward") for r in reasons), reasons
    assert failed["polar"]["outcome"] == failed["polar"]["left_out"] == "no reward"
    assert failed["response"]["output"] == []
    # Gym's own aggregate (ng_collect_rollouts → the agent's /aggregate_metrics) counts the
    # scored row only: the failure row's reward 0.0 is in no mean
    (aggregate,) = json.loads((run / "more.out_aggregate_metrics.json").read_text())
    groups = {g["_ng_task_index"] for g in aggregate["group_level_metrics"]}
    assert groups == {scored["_ng_task_index"]} and failed["_ng_task_index"] not in groups
    assert aggregate["agent_metrics"]["mean/reward"] == pytest.approx(scored["reward"])
    compared = 0
    for row in [*written, scored]:
        compared += await assert_row_is_polars(polar, tap, row)
    assert compared > 0
    print(
        f"nemo-gym: the page's 4 rows and 1 more (+1 to failures), {compared} sampled tokens "
        f"compared, {seconds:.1f} s; Ctrl-C stopped ng_run in {stop_s:.1f} s"
    )


async def assert_row_is_polars(polar: PolarClient, tap: Tap, row: dict[str, Any]) -> int:
    """A rollout row is its Polar session's: reward, version, and per model call the token
    ids and logprobs the gateway recorded, equal to the traces (and to vLLM's samples, whose
    count it returns)."""
    provenance = row["polar"]
    result = await polar.wait(provenance["workflow_id"])
    (session,) = result.sessions
    assert session.session_id == provenance["session_id"]
    assert result.policy_version == provenance["policy_version"]
    # the grade is Polar's, through the resources server's /verify
    assert session.reward is not None and row["reward"] == session.reward
    assert provenance["graded_status"] == session.status.value
    # one assistant message per model call, in chain order, each with Polar's token ids
    ordered = chains(polar.load_traces(session))
    assert provenance["trace_ids"] == [t.trace_id for t in ordered]
    items = row["response"]["output"]
    records = {r.record_id: r for r in polar.storage.list_completions(session.session_id)}
    position = compared = 0
    for trace in ordered:
        assert trace.provenance.policy_version == result.policy_version
        members = sorted((records[rid] for rid in trace.provenance.record_ids), key=lambda r: r.seq)
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
    assert row["agent_ref"] == {"name": "polar_agent"}  # Gym's own bookkeeping of the row
    return compared


AGGREGATE_SCRIPT = """
import json, sys
from fastapi.testclient import TestClient
from omegaconf import OmegaConf
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import ServerClient
from polar.trainers.nemo_gym.servers import PolarAgent, PolarAgentConfig

head = BaseServerConfig(host="127.0.0.1", port=9)
out = {}
for min_scored in (0.0, 0.9):
    config = PolarAgentConfig(
        host="127.0.0.1", port=9, entrypoint="polar_agent.py", name="polar_agent",
        resources_server={"type": "resources_servers", "name": "polar"}, min_scored=min_scored,
    )
    client = ServerClient(head_server_config=head, global_config_dict=OmegaConf.create({}))
    app = PolarAgent(config=config, server_client=client).setup_webserver()
    with TestClient(app) as http:
        for name, rows in json.loads(sys.argv[1]).items():
            answer = http.post("/aggregate_metrics", json={"verify_responses": rows})
            out[f"{name}@{min_scored}"] = [answer.status_code, answer.json()]
print(json.dumps(out))
"""


def test_gyms_aggregate_leaves_polar_failure_rows_out() -> None:
    bin_dir = gym_bin()
    failed = {
        "_ng_task_index": 2,
        "_ng_rollout_index": 0,
        "reward": 0.0,
        "_ng_failure_class": "polar_untrainable",
        "polar": {"outcome": "task_error", "left_out": "task_error: prepare: PrepareFailed: 3"},
    }
    scored = [
        {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0},
        {"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 0.5},
    ]
    batches = {"mixed": [*scored, failed], "none": [failed, failed | {"_ng_task_index": 3}]}
    env = {**os.environ, "PYTHONPATH": ""}
    proc = subprocess.run(
        [str(bin_dir / "python"), "-c", AGGREGATE_SCRIPT, json.dumps(batches)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    status, mixed = out["mixed@0.0"]
    assert status == 200 and mixed["agent_metrics"]["mean/reward"] == 0.75  # not 0.5
    assert [g["_ng_task_index"] for g in mixed["group_level_metrics"]] == [0, 1]
    status, refused = out["none@0.0"]
    assert status == 422, refused
    assert (
        "0 of 2 sessions scored (min_scored 0.0): 2 × task_error (prepare: Prepare"
        in (refused["detail"])
    )
    status, strict = out["mixed@0.9"]
    assert status == 422 and "2 of 3 sessions scored (min_scored 0.9)" in strict["detail"]
    print(f"nemo-gym aggregate: mean {mixed['agent_metrics']['mean/reward']} of the scored rows")

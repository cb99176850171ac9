"""Traces are written once (build); their rewards are a sidecar that every reader joins.

On the suite's S3: `load_traces` joins the sidecar, a session scored before it (its
rewards in the traces, no sidecar) reads as stored, and an export of an S3 key sees the
rewards. End to end (Temporal, a worker, the real gateway, a scripted model): a scored
session's traces object is the one build wrote, and the SDK and the export read it
rewarded.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from polar.client import export as ex
from polar.records import SessionStatus, Trace, TraceProvenance
from polar.settings import Settings
from polar.storage import Storage, TraceRewards, rewards_key, traces_key
from polar.tasks.spec import TaskSpec
from tests.support.scripted_backend import text
from tests.support.scripted_stack import ScriptedStack, running_scripted_stack

REPO = Path(__file__).resolve().parents[2]


def traces(session_id: str, n: int, reward: float | None = None) -> list[Trace]:
    status = SessionStatus.COMPLETED if reward is not None else None
    return [
        Trace(
            trace_id=f"{session_id}/{i}",
            prompt_ids=[1, 2],
            response_ids=[3, 4],
            loss_mask=[1, 1],
            response_logprobs=[-0.5, -0.25],
            reward=reward,
            status=status,
            provenance=TraceProvenance(
                session_id=session_id,
                task_id="t",
                harness="command",
                builder="per_request",
                model="policy",
                completion_seqs=[i],
                record_ids=[f"r{i}"],
            ),
        )
        for i in range(n)
    ]


def test_load_traces_joins_the_rewards_sidecar(storage: Storage) -> None:
    sid = f"rewards-{uuid.uuid4().hex[:8]}"
    key = traces_key(sid, "per_request")
    storage.put_traces(key, traces(sid, 3))
    assert storage.get_rewards(key) is None  # not scored yet: as built
    assert {(t.reward, t.status) for t in storage.load_traces(key)} == {(None, None)}
    sidecar = TraceRewards(
        status=SessionStatus.TIMEOUT,
        rewards={f"{sid}/0": 1.0, f"{sid}/1": 0.25, f"{sid}/2": None},
    )
    size = storage.put_rewards(key, sidecar)
    assert rewards_key(key) == f"sessions/{sid}/traces/per_request.rewards.json"
    assert size == len(storage.get_bytes(rewards_key(key)))
    joined = storage.load_traces(key)
    assert [t.reward for t in joined] == [1.0, 0.25, None]
    assert {t.status for t in joined} == {SessionStatus.TIMEOUT}
    assert [t.reward for t in storage.load_traces(key, rewarded=False)] == [None] * 3
    # an export of the S3 key reads the traces rewarded too
    collected = ex.collect_files([f"s3://{storage.bucket}/{key}"], storage, with_records=False)
    assert [(t.reward, t.status) for t in collected.traces] == [
        (1.0, SessionStatus.TIMEOUT),
        (0.25, SessionStatus.TIMEOUT),
        (None, SessionStatus.TIMEOUT),
    ]


def test_a_session_scored_before_the_sidecar_reads_as_stored(storage: Storage) -> None:
    sid = f"rewards-old-{uuid.uuid4().hex[:8]}"
    key = traces_key(sid, "per_request")
    storage.put_traces(key, traces(sid, 2, reward=0.5))  # score wrote the traces again
    assert not storage.exists(rewards_key(key))
    loaded = storage.load_traces(key)
    assert [(t.reward, t.status) for t in loaded] == [(0.5, SessionStatus.COMPLETED)] * 2
    collected = ex.collect_files([key], storage, with_records=False)
    assert [t.reward for t in collected.traces] == [0.5, 0.5]


@pytest.fixture(scope="module")
async def stack(devstack: object, base_settings: Settings) -> AsyncIterator[ScriptedStack]:
    replies = [text(f"Rollouts turn {i}; the policy learns.") for i in range(8)]
    async with running_scripted_stack(base_settings, replies) as running:
        yield running


async def test_a_scored_session_keeps_its_traces_as_built_and_reads_them_rewarded(
    stack: ScriptedStack, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "examples" / "demo" / "repo", repo)
    spec = TaskSpec.model_validate(
        {
            "task_id": "rewards-sidecar",
            "instruction": "Write a haiku about rollouts to answer.txt.",
            "num_sessions": 1,
            "source": {"type": "dir", "path": str(repo)},
            "harness": {
                "kind": "command",
                "command": "python agent.py",
                "env": {"DEMO_TURNS": "2", "DEMO_STREAM_TURNS": ""},
            },
            "builder": {"name": "per_request"},
            "evaluator": {"kind": "command", "command": "test -s answer.txt"},
            "timeouts": {"harness_s": 120, "evaluate_s": 120},
        }
    )
    polar = stack.polar
    run = await polar.submit(spec)
    result = await polar.wait(run, timeout_s=180)
    (session,) = result.sessions
    assert session.status == SessionStatus.COMPLETED and session.reward == 1.0, session
    assert session.traces_key is not None and session.num_traces == 2, session
    storage = polar.storage
    # written once: the traces object is the one build wrote (no reward, no status in it)
    as_built = storage.load_traces(session.traces_key, rewarded=False)
    assert {(t.reward, t.status) for t in as_built} == {(None, None)}
    sidecar = storage.get_rewards(session.traces_key)
    assert sidecar is not None and sidecar.status == SessionStatus.COMPLETED
    assert sidecar.rewards == {t.trace_id: 1.0 for t in as_built}
    traces_bytes = len(storage.get_bytes(session.traces_key))
    sidecar_bytes = len(storage.get_bytes(rewards_key(session.traces_key)))
    assert session.trace_bytes == traces_bytes + sidecar_bytes
    # every reader sees the rewarded traces: the SDK, its groups, and the export
    loaded = polar.load_traces(session)
    assert {(t.reward, t.status) for t in loaded} == {(1.0, SessionStatus.COMPLETED)}
    collected = await ex.collect_workflow(polar, run.workflow_id, with_records=False)
    exported = await asyncio.to_thread(list, collected.traces)
    assert [(t.trace_id, t.reward) for t in exported] == [(t.trace_id, 1.0) for t in loaded]

"""The gateway channel, attacked from inside real sessions (adversary/attacks_channel.py).

Each attack is a `polar submit`-style session on the sealed stack's worker, on every
runtime whose fixtures run here:
- slowloris: thousands of half-open connections on the channel (docker and podman also
  straight to `/run/polar/gateway.sock`, past the forwarder), while an honest session on
  the same worker must still complete with reward 1; the attacker's session is ended with
  the reason in its log, and the worker's fds stay bounded;
- a call abandoned before its answer is recorded 499 and never trained, as a direct one is;
- sampling controls that make a sample off-policy are refused (400, OpenAI-shaped);
- a request whose record would pass the record size limit is refused (413), and the
  session's later calls are still recorded.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from polar.records import SessionStatus
from polar.storage import artifact_key
from tests.support.adversary.matrix import swebench_evaluator
from tests.support.adversary.stack import (
    SealedStack,
    attack_report,
    attack_spec,
    one_session,
    polar_for,
    runtime_spec,
    stack_for,
    task_repo,
)
from tests.support.runtime_kinds import every_runtime_kind
from tests.support.scripted_backend import text

pytestmark = pytest.mark.slow

HARNESS = "python3 tools/attacks_channel.py"
NO_GRADE = {"kind": "none"}
SLOWLORIS = [("local", "tcp"), ("bwrap", "tcp"), ("docker", "tcp"), ("docker", "unix")]
SLOWLORIS += [("podman", "unix")]
RUNTIMES = every_runtime_kind(["docker", "podman", "local", "bwrap"])


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _peak_fds(stop: asyncio.Event, peak: list[int]) -> None:
    """The worker's open fds (it runs in this process), at their highest, until `stop`."""
    while not stop.is_set():
        peak[0] = max(peak[0], _fds())
        await asyncio.sleep(0.2)


def _stderr(stack: SealedStack, session_id: str) -> str:
    key = artifact_key(session_id, "harness-attempt1.stderr")
    return stack.storage.get_bytes(key).decode(errors="replace")


def _setup(
    kind: str, sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> tuple[SealedStack, Any, Path, str, dict[str, Any]]:
    stack = stack_for(kind, sealed_stack, request)
    repo, sha = task_repo(stack, kind, tmp_path)
    return stack, polar_for(stack, kind), repo, sha, runtime_spec(kind, request)


@pytest.mark.parametrize(("kind", "target"), SLOWLORIS)
async def test_slowloris_ends_the_attacker_never_its_neighbour(
    kind: str,
    target: str,
    sealed_stack: SealedStack,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    stack, polar, repo, sha, runtime = _setup(kind, sealed_stack, tmp_path, request)
    tag = f"loris-{kind}-{uuid.uuid4().hex[:6]}"
    attack_env = {
        "ATTACK_CHANNEL": "slowloris",
        "ATTACK_TARGET": target,
        "ATTACK_CONNS": "3000",
        "ATTACK_HOLD_S": "20",
    }
    honest_env = {"ATTACK_CHANNEL": "wait", "ATTACK_WAIT_S": "6", "ATTACK_FIX": "1"}
    before = _fds()
    peak = [before]
    stop = asyncio.Event()
    sampler = asyncio.create_task(_peak_fds(stop, peak))
    try:
        attacker, neighbour = await asyncio.gather(
            one_session(
                polar,
                attack_spec(
                    f"{tag}-a", repo, sha, runtime, NO_GRADE, attack_env, 90, harness=HARNESS
                ),
            ),
            one_session(
                polar,
                attack_spec(
                    f"{tag}-n",
                    repo,
                    sha,
                    runtime,
                    swebench_evaluator(sha),
                    honest_env,
                    90,
                    harness=HARNESS,
                ),
            ),
        )
    finally:
        stop.set()
        await sampler
    attack = attack_report(stack.storage, attacker)
    honest = attack_report(stack.storage, neighbour)
    stderr = _stderr(stack, attacker.session_id)
    print(
        f"RESULT slowloris {kind}/{target}: attacker {attacker.status.value} opened="
        f"{attack.get('opened')} still_open={attack.get('still_open')}; neighbour "
        f"{neighbour.status.value} reward={neighbour.reward} call={honest.get('honest_call')}; "
        f"worker fds {before} -> peak {peak[0]}; stderr tail {stderr[-300:]!r}"
    )
    assert neighbour.status == SessionStatus.COMPLETED and neighbour.reward == 1.0, neighbour
    assert honest["honest_call"] == 200, honest
    assert attacker.status == SessionStatus.HARNESS_FAILED, attacker
    assert "polar: the gateway channel" in stderr and "connections" in stderr, stderr[-2000:]
    assert int(attack["opened"]) < 3000, attack  # ended long before it got them all
    assert peak[0] - before < 600, (before, peak)


@pytest.mark.parametrize("kind", RUNTIMES)
async def test_an_abandoned_call_is_recorded_499_and_not_trained(
    kind: str, sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stack, polar, repo, sha, runtime = _setup(kind, sealed_stack, tmp_path, request)
    assert sealed_stack.backend is not None
    # the session's first call takes 3 s upstream (its caller gives up at 1.1 s)
    sealed_stack.backend.replies.appendleft(text("too late", delay_s=3))
    env = {"ATTACK_CHANNEL": "abandon"}
    spec = attack_spec(
        f"abandon-{kind}-{uuid.uuid4().hex[:6]}", repo, sha, runtime, NO_GRADE, env, harness=HARNESS
    )
    session = await one_session(polar, spec)
    report = attack_report(stack.storage, session)
    records = stack.storage.list_completions(session.session_id)
    statuses = [(r.status_code, r.client_disconnected) for r in records]
    print(
        f"RESULT abandon {kind}: records {statuses} unseen {session.unseen_completions} "
        f"traces {session.num_traces} report {report}"
    )
    assert report["abandoned_answer"] == "timeout" and report["normal_call"] == 200, report
    assert statuses == [(499, True), (200, False)], statuses
    assert session.unseen_completions == {"client_disconnected": 1}, session
    assert session.num_traces == 1, session


@pytest.mark.parametrize("kind", ["docker", "local"])
async def test_off_policy_sampling_controls_are_refused(
    kind: str, sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stack, polar, repo, sha, runtime = _setup(kind, sealed_stack, tmp_path, request)
    env = {"ATTACK_CHANNEL": "sampling"}
    spec = attack_spec(
        f"sampling-{kind}-{uuid.uuid4().hex[:6]}",
        repo,
        sha,
        runtime,
        NO_GRADE,
        env,
        harness=HARNESS,
    )
    session = await one_session(polar, spec)
    report = attack_report(stack.storage, session)
    records = stack.storage.list_completions(session.session_id)
    print(
        f"RESULT sampling {kind}: {report['controls']} plain={report['plain']} "
        f"records={len(records)} traces={session.num_traces}"
    )
    assert set(report["controls"].values()) == {400}, report
    assert report["plain"] == 200, report
    assert len(records) == 1 and session.num_traces == 1, records


@pytest.mark.parametrize("kind", ["docker", "local"])
async def test_an_oversized_record_is_refused_and_nothing_is_lost(
    kind: str, sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stack, polar, repo, sha, runtime = _setup(kind, sealed_stack, tmp_path, request)
    env = {"ATTACK_CHANNEL": "sampling,big", "ATTACK_BIG_MB": "30"}
    spec = attack_spec(
        f"big-{kind}-{uuid.uuid4().hex[:6]}", repo, sha, runtime, NO_GRADE, env, harness=HARNESS
    )
    session = await one_session(polar, spec)
    report = attack_report(stack.storage, session)
    keys = stack.storage.list_keys(f"sessions/{session.session_id}/completions/")
    sizes = [len(stack.storage.get_bytes(k)) for k in keys]
    print(
        f"RESULT big {kind}: status {report['big']} {report['big_error']} then "
        f"{report['small_after']}; record sizes {sizes}"
    )
    assert report["big"] == 413 and report["big_error"] == "record_too_large", report
    assert report["small_after"] == 200 and report["plain"] == 200, report
    assert len(sizes) == 2 and max(sizes) < 1024 * 1024, sizes

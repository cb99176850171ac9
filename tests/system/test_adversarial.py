"""The sealed session, attacked: an adversarial harness against real sessions on the real stack.

The harness (tests/support/adversary/attack.py) tries every attack of issue 9
from inside a session, on Docker, podman and the `local` runtime: it opens
every port the stack listens on (Temporal's gRPC and HTTP APIs, the Web UI,
S3, the SeaweedFS master, volume and filer, the gateway, the inference
backend), calls the backend directly, calls the gateway through its channel
with another session's valid key and on its admin, metrics and docs routes,
plants reward files from a detached process that outlives it, edits the
graded test, adds a conftest.py that passes every test, makes the code under
test print fake `PASSED` lines and exit 0, and leaves a process that puts the
real fix in after it exits. Every attacking session must end with the honest
reward (its code is wrong: 0), the honest twin with 1; a disk-filling and a
fork-bombing harness end that one session (`harness_failed` / `timeout`) with
their logs kept.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from polar.records import SessionStatus
from polar.session_keys import SessionIdentity, mint_session_key
from polar.storage import artifact_key
from tests.support import delegated_cgroup, unprivileged
from tests.support.adversary.matrix import swebench_evaluator
from tests.support.adversary.stack import (
    SealedStack,
    attack_report,
    attack_spec,
    evidence,
    one_session,
    polar_for,
    runtime_spec,
    stack_for,
    task_repo,
    user_stack,
)
from tests.support.container_sessions import skip_without_disk_watchdog
from tests.support.runtime_kinds import every_runtime_kind

pytestmark = pytest.mark.slow

# the command evaluator's grader reads pytest's junit XML, not its exit code (which the code
# under test can force) nor its log
JUNIT_GRADER = (
    'j="${TMPDIR:-/tmp}/junit.xml"; '
    'python3 -m pytest -q -p no:cacheprovider --junitxml="$j" tests/test_calc.py; '
    "J=$j python3 -c \"import os, sys, xml.etree.ElementTree as E; r = E.parse(os.environ['J'])"
    ".getroot(); s = r if r.tag == 'testsuite' else r[0]; "
    "sys.exit(int(s.get('failures')) + int(s.get('errors')) or int(s.get('tests')) < 2)\""
)


RUNTIMES = every_runtime_kind(["docker", "podman", "local", "bwrap"])
"""The sealed runtimes every attack runs against (`bwrap`: `local` on a non-root worker)."""
BWRAP_CGROUP = "bwrap-cgroup"
"""The user worker in a delegated cgroup (its queue's suffix)."""
BOMB_PIDS = 128


@pytest.mark.parametrize("kind", RUNTIMES)
async def test_attacks_get_the_honest_reward(
    kind: str, sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stack = stack_for(kind, sealed_stack, request)
    repo, sha = task_repo(stack, kind, tmp_path)
    runtime = runtime_spec(kind, request)
    polar = polar_for(stack, kind)
    victim = SessionIdentity(f"victim-{uuid.uuid4().hex[:8]}", "victim-task")
    env = {
        "ATTACK_PORTS": ",".join(f"{name}={port}" for name, port in stack.ports.items()),
        "ATTACK_UPSTREAM": stack.upstream,
        "ATTACK_VICTIM_KEY": mint_session_key(victim, polar.settings.session_secret),
    }
    tag = f"adv-{kind}-{uuid.uuid4().hex[:6]}"
    attacked_swe, attacked_cmd, honest = await asyncio.gather(
        one_session(
            polar, attack_spec(f"{tag}-swe", repo, sha, runtime, swebench_evaluator(sha), env)
        ),
        one_session(
            polar,
            attack_spec(
                f"{tag}-cmd",
                repo,
                sha,
                runtime,
                {
                    "kind": "command",
                    "command": JUNIT_GRADER,
                    "protected": ["tests/**", "conftest.py", "**/conftest.py"],
                },
                env,
            ),
        ),
        one_session(
            polar,
            attack_spec(
                f"{tag}-fix", repo, sha, runtime, swebench_evaluator(sha), env | {"ATTACK_FIX": "1"}
            ),
        ),
    )
    for session in (attacked_swe, attacked_cmd, honest):
        report = attack_report(stack.storage, session)
        print(
            f"{kind} {session.session_id}: {session.status} reward={session.reward} "
            f"{session.evaluation!r}; attack: {report}"
        )
        assert session.status == SessionStatus.COMPLETED, session
        # nothing but the channel: no port of the stack, no direct backend
        assert report["reached_ports"] == [], report
        assert report["upstream_direct"] == -1, report
        # the channel: model calls only, every one recorded as this session's
        assert report["own_call"] == 200 and report["victim_key_call"] == 200, report
        assert set(report["routes"].values()) == {404}, report
        records = stack.storage.list_completions(session.session_id)
        assert len(records) == 2 and {r.session_id for r in records} == {session.session_id}
    assert stack.storage.count_completions(victim.session_id) == 0
    # a wrong fix plus every attack on grading: not resolved; the honest fix: resolved
    assert attacked_swe.reward == 0.0, evidence(stack.storage, attacked_swe)
    assert attacked_cmd.reward == 0.0, attacked_cmd.evaluation
    assert honest.reward == 1.0, honest.evaluation


@pytest.fixture(scope="module")
def bwrap_cgroup_stack(sealed_stack: SealedStack) -> Iterator[SealedStack]:
    """A worker of an ordinary user (bwrap) in a cgroup v2 dir delegated to it: each sandbox
    gets a child with pids.max. Without one, RLIMIT_NPROC (all the user's processes) is the
    only cap, and a fork bomb at it stops its neighbours' forks: skipped, saying why."""
    entry = unprivileged.ensure_user()
    try:
        with (
            delegated_cgroup.delegated(entry.pw_uid, entry.pw_gid) as cgroup,
            user_stack(sealed_stack, BWRAP_CGROUP, cgroup) as stack,
        ):
            yield stack
    except delegated_cgroup.Unavailable as exc:
        reason = f"bwrap has no per-session pids cap here: {exc}"
        print(f"skipping the bwrap neighbour test: {reason}")
        pytest.skip(reason)


@pytest.mark.parametrize("kind", RUNTIMES)
async def test_disk_filler_and_fork_bomb_end_only_their_session(
    kind: str, sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A disk filler and a fork bomb beside an honest session with the same pids cap (as a
    task's sessions have): each attacker ends its own session, the neighbour completes. On
    `local` (root) each session is a uid of its own, so RLIMIT_NPROC is per session; on
    `bwrap` (one user) only a delegated cgroup's pids.max is."""
    if kind in ("docker", "podman"):
        request.getfixturevalue(f"{kind}_image")  # the engine up before its driver is read
        skip_without_disk_watchdog(kind)
    stack = request.getfixturevalue("bwrap_cgroup_stack") if kind == "bwrap" else sealed_stack
    user_kind = BWRAP_CGROUP if kind == "bwrap" else kind
    polar = polar_for(stack, user_kind)
    repo, sha = task_repo(stack, user_kind, tmp_path)
    tag = f"adv-limits-{kind}-{uuid.uuid4().hex[:6]}"
    evaluator = {"kind": "command", "command": "true"}
    filler, bomb, bystander = await asyncio.gather(
        one_session(
            polar,
            attack_spec(
                f"{tag}-disk",
                repo,
                sha,
                runtime_spec(kind, request, disk="64m"),
                evaluator,
                {"ATTACK_FILL_MB": "400"},
            ),
        ),
        one_session(
            polar,
            attack_spec(
                f"{tag}-bomb",
                repo,
                sha,
                runtime_spec(kind, request, pids=BOMB_PIDS),
                evaluator,
                {"ATTACK_FORK_BOMB": "1"},
                harness_s=15,
            ),
        ),
        one_session(
            polar,
            attack_spec(
                f"{tag}-ok",
                repo,
                sha,
                runtime_spec(kind, request, pids=BOMB_PIDS),
                swebench_evaluator(sha),
                {"ATTACK_FIX": "1"},
            ),
        ),
    )
    print(
        f"{kind}: disk {filler.status} {filler.error!r}; bomb {bomb.status}; "
        f"bystander {bystander.status} {bystander.reward}"
    )
    assert filler.status == SessionStatus.HARNESS_FAILED, filler
    stderr = stack.storage.get_bytes(artifact_key(filler.session_id, "harness-attempt1.stderr"))
    assert b"disk limit exceeded" in stderr
    assert bomb.status == SessionStatus.TIMEOUT, bomb
    assert (
        "ATTACK-REPORT"
        in stack.storage.get_bytes(
            artifact_key(bomb.session_id, "harness-attempt1.stdout")
        ).decode()
    )
    assert bystander.status == SessionStatus.COMPLETED and bystander.reward == 1.0, bystander

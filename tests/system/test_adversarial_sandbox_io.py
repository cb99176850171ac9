"""The `local` runtime at the sandbox's edges (issue 32), on a root worker (`local`) and a
worker of an ordinary user (`bwrap`): real sessions whose harness
(tests/support/adversary/attacks_sandbox_io.py)

- truncates its stderr log, where the started marker used to be, then exits 0 (a wrong fix:
  graded 0), 1 (a failed run) or 0 with the right fix: each is judged by what it did
  (policy_failure, policy_failure, ok), never `infra_error:sandbox_start`, which kept a sure
  0 out of its group;
- writes 300 MB into /tmp (and 150 MB into /var/tmp and /dev/shm each) with `disk: 100m`:
  it is stopped by the disk limit or cannot write past it, and nothing of it is left in the
  host's /tmp, /var/tmp or /dev/shm after the session;
- uses /tmp and a POSIX semaphore honestly (the control): reward 1.

Each session prints `ADV-ROW attack runtime reward outcome`: the table of the issue's closing
note.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from polar.contracts import SessionResult
from polar.records import OutcomeClass, SessionStatus
from polar.storage import artifact_key
from polar.tasks.spec import InfraErrors
from tests.support.adversary.matrix import swebench_evaluator
from tests.support.adversary.stack import (
    SealedStack,
    attack_report,
    attack_spec,
    polar_for,
    runtime_spec,
    stack_for,
    task_repo,
)

pytestmark = pytest.mark.slow

HARNESS = "python3 tools/attacks_sandbox_io.py"
HOST_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
DISK_MB = 100


def _row(attack: str, kind: str, session: SessionResult, report: dict[str, Any]) -> None:
    outcome = session.outcome
    label = None
    if outcome is not None:
        label = f"{outcome.outcome.value}:{outcome.reason.value if outcome.reason else ''}"
    detail = (session.evaluation or session.error or "")[:200]
    print(
        f"ADV-ROW {attack} {kind} reward={session.reward} status={session.status.value} "
        f"outcome={label} report={json.dumps(report)[:300]} detail={detail!r}"
    )


def _left_on_host(session: SessionResult) -> list[str]:
    return [
        f"{top}/polar-io-{session.session_id}"
        for top in HOST_DIRS
        if Path(top, f"polar-io-{session.session_id}").exists()
    ]


@pytest.mark.parametrize("kind", ["local", "bwrap"])
async def test_the_sandbox_edges_get_the_honest_verdict(
    kind: str, sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stack = stack_for(kind, sealed_stack, request)
    polar = polar_for(stack, kind)
    repo, sha = task_repo(stack, kind, tmp_path)
    swe = swebench_evaluator(sha)
    tag = f"advio-{kind}-{uuid.uuid4().hex[:6]}"

    def spec(name: str, only: str, **env: str) -> Any:
        task = attack_spec(
            f"{tag}-{name}",
            repo,
            sha,
            runtime_spec(kind, request, disk=f"{DISK_MB}m"),
            swe,
            {"ATTACK_ONLY": only, **env},
            harness=HARNESS,
        )
        # an infra error is not run again: one placement says what the session ends as
        return task.model_copy(update={"infra_errors": InfraErrors(retries=0)})

    async def run(task: Any) -> SessionResult:
        result = await polar.wait(await polar.submit(task), timeout_s=600)
        [session] = result.sessions
        return session

    runs = {
        "erase_marker+exit0": run(spec("erase0", "erase_marker")),
        "erase_marker+exit1": run(spec("erase1", "erase_marker", ATTACK_EXIT="1")),
        "erase_marker+fix (honest)": run(spec("erasefix", "erase_marker", ATTACK_FIX="1")),
        "fill_tmp": run(spec("filltmp", "fill_tmp", ATTACK_TMP_MB="300")),
        "use_tmp (honest)": run(spec("usetmp", "use_tmp", ATTACK_FIX="1")),
    }
    done = dict(zip(runs, await asyncio.gather(*runs.values()), strict=True))
    reports: dict[str, dict[str, Any]] = {}
    for attack, session in done.items():
        try:
            reports[attack] = attack_report(stack.storage, session)
        except Exception as exc:  # noqa: BLE001 - a harness that left no log
            reports[attack] = {"missing": repr(exc)}
        _row(attack, kind, session, reports[attack])

    left = {attack: _left_on_host(session) for attack, session in done.items()}
    for paths in left.values():  # what an unfixed sandbox left: not the next test's
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)

    want = {
        "erase_marker+exit0": (SessionStatus.COMPLETED, OutcomeClass.POLICY_FAILURE, 0.0),
        "erase_marker+exit1": (SessionStatus.HARNESS_FAILED, OutcomeClass.POLICY_FAILURE, None),
        "erase_marker+fix (honest)": (SessionStatus.COMPLETED, OutcomeClass.OK, 1.0),
        "use_tmp (honest)": (SessionStatus.COMPLETED, OutcomeClass.OK, 1.0),
    }
    failures = []
    for attack, (status, outcome, reward) in want.items():
        session = done[attack]
        got = session.outcome.outcome if session.outcome else None
        if session.status != status or got != outcome or session.harness_started is not True:
            failures.append(f"{attack}: {session.status} {session.outcome} {session.error}")
        if reward is not None and session.reward != reward:
            failures.append(f"{attack}: reward {session.reward}, want {reward}")
    if not reports["erase_marker+exit0"].get("erased"):
        failures.append(f"the harness erased nothing: {reports['erase_marker+exit0']}")

    fill = done["fill_tmp"]
    if fill.reward or (fill.outcome and fill.outcome.outcome != OutcomeClass.POLICY_FAILURE):
        failures.append(f"fill_tmp: {fill.status} {fill.outcome} reward {fill.reward}")
    stderr = stack.storage.get_bytes(artifact_key(fill.session_id, "harness-attempt1.stderr"))
    stopped = b"disk limit exceeded" in stderr
    written = reports["fill_tmp"].get("written_mb") or {}
    if not stopped and sum(written.values()) > DISK_MB:
        failures.append(f"fill_tmp wrote {written} MB past its {DISK_MB} MB limit, not stopped")
    if any(left.values()):
        failures.append(f"left in the host's dirs after the session: {left}")
    assert not failures, "\n".join(failures)

"""The `local` runtime, attacked through the host's file system (issue 21): real sessions whose
harness (tests/support/adversary/attacks_local.py) plants symlinks where the worker writes,
writes into its evaluator's fresh runtime and its sibling's workspace, sets a git clean
filter for the patch extraction, reads the stack's state, and grows an unbounded patch.
Every attacking session must end with the honest reward (its code is wrong: 0), with
nothing written through its links, no filter run, no sibling changed and no state read;
the honest install control (`pip install -e .` in the evaluator) gets 1.

Each session prints `ADV-ROW attack runtime reward`: the table of the issue's closing note.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from polar.contracts import SessionResult
from polar.records import SessionStatus
from polar.storage import artifact_key
from tests.support import unprivileged
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

HARNESS = "python3 tools/attacks_local.py"
INSTALL = (
    'printf \'from setuptools import setup\\nsetup(name="calc", version="0", '
    'py_modules=["calc"])\\n\' > setup.py && python3 -m pip install -q --no-index -e .'
)
COMMAND = {
    "kind": "command",
    "command": 'python3 -c "from calc import add; assert add(2, 2) == 4"',
    "protected": ["tests/**", "**/conftest.py"],
}


def _owned_dir(stack: SealedStack, kind: str, tmp_path: Path, name: str, mode: int) -> Path:
    """A dir the worker of `kind` owns (the bwrap worker's user), mode `mode`."""
    top = stack.user_dir if kind == "bwrap" and stack.user_dir else tmp_path
    path = top / f"{name}-{uuid.uuid4().hex[:6]}"
    path.mkdir()
    path.chmod(mode)
    if kind == "bwrap":
        subprocess.run(["chown", unprivileged.USER, str(path)], check=True)
    return path


async def _run(stack: SealedStack, kind: str, spec: Any, sessions: int = 1) -> list[SessionResult]:
    polar = polar_for(stack, kind)
    if sessions > 1:
        spec = spec.model_copy(update={"num_sessions": sessions})
    result = await polar.wait(await polar.submit(spec), timeout_s=600)
    return sorted(result.sessions, key=lambda s: s.index)


def _row(attack: str, kind: str, session: SessionResult, report: dict[str, Any]) -> None:
    detail = (session.evaluation or session.error or "")[:300]
    print(
        f"ADV-ROW {attack} {kind} reward={session.reward} status={session.status.value} "
        f"report={json.dumps(report)[:400]} detail={detail!r}"
    )


@pytest.mark.parametrize("kind", ["local", "bwrap"])
async def test_local_attacks_get_the_honest_reward(
    kind: str, sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stack = stack_for(kind, sealed_stack, request)
    polar = polar_for(stack, kind)
    repo, sha = task_repo(stack, kind, tmp_path)
    runtime = runtime_spec(kind, request)
    swe = swebench_evaluator(sha)
    targets = _owned_dir(stack, kind, tmp_path, "targets", 0o755)
    target = targets / "victim.txt"
    target.write_text("untouched\n")
    if kind == "bwrap":
        subprocess.run(["chown", unprivileged.USER, str(target)], check=True)
    marks = _owned_dir(stack, kind, tmp_path, "marks", 0o1777)
    data_dir = Path(polar.settings.data_dir).resolve()
    env = {
        "ATTACK_TARGET": str(target),
        "ATTACK_MARK_DIR": str(marks),
        "ATTACK_DATA_DIR": str(data_dir),
        "ATTACK_BIG_MB": "70",
    }
    tag = f"advl-{kind}-{uuid.uuid4().hex[:6]}"

    def spec(name: str, evaluator: dict[str, Any], **extra: str) -> Any:
        only = {"ATTACK_ONLY": name.split(":")[0]}
        return attack_spec(
            f"{tag}-{name.replace('_', '').replace(':', '')}",
            repo,
            sha,
            runtime,
            evaluator,
            env | only | extra,
            harness=HARNESS,
        )

    install = json.loads(json.dumps(swe))
    install["swebench"]["install"] = INSTALL
    runs = {
        "eval_symlinks": _run(stack, kind, spec("eval_symlinks", swe)),
        "eval_symlinks:command": _run(stack, kind, spec("eval_symlinks:cmd", COMMAND)),
        "eval_workspace": _run(stack, kind, spec("eval_workspace", swe)),
        "git_filter": _run(stack, kind, spec("git_filter", swe)),
        "sibling": _run(stack, kind, spec("sibling", swe), sessions=2),
        "read_state": _run(stack, kind, spec("read_state", swe)),
        "big_patch": _run(stack, kind, spec("big_patch", swe)),
        "install (honest)": _run(stack, kind, spec("install", install, ATTACK_FIX="1")),
    }
    done = dict(zip(runs, await asyncio.gather(*runs.values()), strict=True))
    reports: dict[str, dict[str, Any]] = {}
    for attack, sessions in done.items():
        for session in sessions:
            try:
                report = attack_report(stack.storage, session)
            except Exception as exc:  # noqa: BLE001 - a harness that left no log
                report = {"missing": repr(exc)}
            reports[f"{attack}/{session.index}"] = report
            _row(attack, kind, session, report)

    failures = []
    for attack, sessions in done.items():
        want = 1.0 if attack.startswith("install") else 0.0
        for session in sessions:
            if session.status != SessionStatus.COMPLETED or session.reward != want:
                failures.append(f"{attack}: {session.status} reward {session.reward}")
    if target.read_text() != "untouched\n":
        failures.append(f"written through a harness symlink: {target.read_text()[:200]!r}")
    [gf] = done["git_filter"]
    gf_patch = stack.storage.get_bytes(artifact_key(gf.session_id, "swebench-model.patch"))
    if b"FILTERED-BY-HARNESS" in gf_patch:
        failures.append("the extraction ran the repository's clean filter")
    if list(marks.iterdir()):
        failures.append(f"git ran the repository's filter/textconv/hooks: {list(marks.iterdir())}")
    if reports["eval_workspace/0"].get("eval_written"):
        failures.append(f"evaluator workspace written: {reports['eval_workspace/0']}")
    if reports["sibling/1"].get("sibling_written"):
        failures.append(f"sibling written: {reports['sibling/1']}")
    if reports["read_state/0"].get("readable"):
        failures.append(f"stack state readable: {reports['read_state/0']['readable'][:20]}")
    [big] = done["big_patch"]
    if "patch" not in (big.evaluation or "") or "limit" not in (big.evaluation or ""):
        failures.append(f"big patch not refused: {big.evaluation!r:.300}")
    stored = stack.storage.get_bytes(artifact_key(big.session_id, "swebench-model.patch"))
    if len(stored) > 1 << 20:
        failures.append(f"a {len(stored)}-byte patch was stored")
    assert not failures, "\n".join(failures)


async def test_git_filter_harmless_in_docker(
    sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The same clean filter in a container session: the extraction never runs it."""
    repo, sha = task_repo(sealed_stack, "docker", tmp_path)
    spec = attack_spec(
        f"advl-docker-{uuid.uuid4().hex[:6]}-gitfilter",
        repo,
        sha,
        runtime_spec("docker", request),
        swebench_evaluator(sha),
        {"ATTACK_ONLY": "git_filter", "ATTACK_MARK_DIR": "/tmp"},
        harness=HARNESS,
    )
    [session] = await _run(sealed_stack, "docker", spec)
    _row("git_filter", "docker", session, attack_report(sealed_stack.storage, session))
    assert session.status == SessionStatus.COMPLETED and session.reward == 0.0, session
    patch = sealed_stack.storage.get_bytes(artifact_key(session.session_id, "swebench-model.patch"))
    # the extraction's git ran no filter: notes.txt is in the patch as the harness wrote it
    assert b"+a note" in patch and b"FILTERED-BY-HARNESS" not in patch, patch[:2000]

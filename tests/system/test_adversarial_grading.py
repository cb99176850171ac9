"""Grading, attacked from the code being graded (issue 21): every attack is a real session.

The harness (tests/support/adversary/attacks_grading.py) makes a WRONG fix plus one attack
that runs later, inside the evaluator's test run: code the test imports writes the command
evaluator's reward file; code under test rewrites the pytest results file at exit and calls
`os._exit(0)`; a root-level `iniconfig.py` shadows pytest's dependency and adds an in-memory
plugin; package code monkeypatches `_pytest.reports`; and, for a command evaluator without
`protected`, the harness rewrites the test its command names and adds a conftest. Each must
end with reward 0 while the honest fix gets 1, on every sealed runtime.

No process of the graded code can see the grade's paths (`grade_view`): the code under test
prints its environment, its fds' targets, its own and its parent's argv (and the parent's
environment) and the folders they name, under swebench and under a command evaluator with a
reward_command. None of it may name a reward file, a results file or the runner's key file,
nor hold the key. The runner's folder is in argv (the plugin's path, the runner's `DIR`) by
design: what the runner writes there is signed with a key that is gone before the tests
start, and the runner's environment is unreadable (non-dumpable) (docs/threat-model.md).
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from polar.records import SessionStatus
from polar.storage import Storage, artifact_key
from polar.tasks.spec import EvaluatorSpec
from tests.support.adversary.matrix import swebench_evaluator
from tests.support.adversary.stack import (
    SealedStack,
    attack_spec,
    evidence,
    one_session,
    polar_for,
    runtime_spec,
    stack_for,
    task_repo,
)
from tests.support.runtime_kinds import every_runtime_kind

pytestmark = pytest.mark.slow

HARNESS = "python3 tools/attacks_grading.py"
ADD_CHECK = 'python3 -c "from calc import add; assert add(2, 2) == 4"'
PYTEST_CHECK = "python3 -m pytest -q -p no:cacheprovider tools/attacks_grading.py"
# the reward from the command's exit code, written where only reward_command is told
REWARD_COMMAND = (
    "python3 -c \"import json, os; json.dump({'reward': float(os.environ['POLAR_COMMAND_EXIT_CODE']"
    " == '0')}, open(os.environ['POLAR_REWARD_FILE'], 'w'))\""
)


def command_evaluator(command: str) -> dict[str, Any]:
    """A command evaluator; with a reward_command where this checkout's spec has one."""
    evaluator: dict[str, Any] = {"kind": "command", "command": command}
    if "reward_command" in EvaluatorSpec.model_fields:
        evaluator["reward_command"] = REWARD_COMMAND
    return evaluator


def cases(sha: str) -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    """Session name → (evaluator, harness env); the honest controls first."""
    swe = swebench_evaluator(sha)
    return {
        "honest fix (swebench)": (swe, {"ATTACK_FIX": "1"}),
        "honest fix (command)": (command_evaluator(PYTEST_CHECK), {"ATTACK_FIX": "1"}),
        "reward_env (command)": (command_evaluator(ADD_CHECK), {"ATTACK_GRADING": "reward_env"}),
        "results_rewrite (swebench)": (swe, {"ATTACK_GRADING": "results_rewrite"}),
        "iniconfig_shadow (swebench)": (swe, {"ATTACK_GRADING": "iniconfig_shadow"}),
        "reports_monkeypatch (swebench)": (swe, {"ATTACK_GRADING": "reports_monkeypatch"}),
        "deselect_all (swebench)": (swe, {"ATTACK_GRADING": "deselect_all"}),
        "key_back (swebench)": (swe, {"ATTACK_GRADING": "key_back"}),
        "keyboard_interrupt (swebench)": (swe, {"ATTACK_GRADING": "keyboard_interrupt"}),
        "interpreter_swap (command)": (
            command_evaluator(ADD_CHECK),
            {"ATTACK_GRADING": "interpreter_swap"},
        ),
        "usercustomize (command)": (
            command_evaluator(ADD_CHECK),
            {"ATTACK_GRADING": "usercustomize"},
        ),
        "grade_view (swebench)": (swe, {"ATTACK_GRADING": "grade_view"}),
        "grade_view (command)": (command_evaluator(ADD_CHECK), {"ATTACK_GRADING": "grade_view"}),
        "command_unprotected (command)": (
            {"kind": "command", "command": PYTEST_CHECK},
            {"ATTACK_GRADING": "command_unprotected"},
        ),
    }


GRADE_NAMES = re.compile(r"reward|results\.json|/key$", re.I)
"""What no environment, fd or argv of the code under test may name (reward files, the
runner's results file and key file, the plugin's old results file `pytest-results.jsonl`)."""
GRADE_VARIABLES = ("POLAR_REWARD_FILE", "POLAR_PYTEST_RESULTS", "POLAR_TRACES_FILE")
KEY = re.compile(r"\b[0-9a-f]{64}\b")
"""The runner's key (secrets.token_hex(32)) or anything that looks like it."""


def grade_views(storage: Storage, session: Any) -> list[dict[str, Any]]:
    """The `GRADE-VIEW` lines the code under test printed into the evaluator's logs."""
    views = []
    for name in ("swebench-tests.log", "evaluate.stdout"):
        try:
            log = storage.get_bytes(artifact_key(session.session_id, name)).decode()
        except Exception:  # noqa: BLE001 - the other evaluator's log
            continue
        for line in log.splitlines():
            if line.startswith("GRADE-VIEW "):
                views.append(json.loads(line.removeprefix("GRADE-VIEW ")))
    return views


def assert_grade_unseen(view: dict[str, Any], swebench: bool) -> None:
    """Nothing the code under test can see names the grade's files or holds the key."""
    assert not set(GRADE_VARIABLES) & set(view["environ"]), view["environ"]
    seen = {
        **{f"env {k}": f"{k}={v}" for k, v in view["environ"].items()},
        **{f"fd {fd}": target for fd, target in view["fds"].items()},
    }
    for part in ("cmdline", "parent_cmdline", "parent_environ"):
        values = view[part] if isinstance(view[part], list) else [view[part]]
        seen |= {f"{part} {i}": str(v) for i, v in enumerate(values)}
    for folder, names in view["folders"].items():
        listing = names if isinstance(names, list) else [names]
        seen |= {f"in {folder}": f"{folder}/{n}" for n in listing}
    named = {where: what for where, what in seen.items() if GRADE_NAMES.search(what)}
    assert not named, named
    keyish = {where: what for where, what in seen.items() if KEY.search(what)}
    assert not keyish, keyish
    if swebench:  # the runner is the parent: non-dumpable, its environment closed to its child
        assert any("pytest_runner.py" in a for a in view["parent_cmdline"]), view
        assert str(view["parent_environ"]).startswith("unreadable"), view["parent_environ"]
        # the runner's folder is named (the plugin's path) and holds no key any more
        grading = [f for f in view["folders"] if f.endswith("polar-grading")]
        assert grading and all("key" not in view["folders"][f] for f in grading), view


@pytest.mark.parametrize("kind", every_runtime_kind(["docker", "podman", "local", "bwrap"]))
async def test_grading_attacks_get_reward_zero(
    kind: str, sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    stack = stack_for(kind, sealed_stack, request)
    repo, sha = task_repo(stack, kind, tmp_path)
    runtime = runtime_spec(kind, request)
    polar = polar_for(stack, kind)
    tag = f"advg-{kind}-{uuid.uuid4().hex[:6]}"
    named = cases(sha)
    sessions = await asyncio.gather(
        *(
            one_session(
                polar,
                attack_spec(f"{tag}-{i}", repo, sha, runtime, evaluator, env, harness=HARNESS),
            )
            for i, (evaluator, env) in enumerate(named.values())
        )
    )
    outcome = dict(zip(named, sessions, strict=True))
    for name, session in outcome.items():
        print(
            f"GRADING-ROW | {name} | {kind} | {session.reward} | {session.status.value} | "
            f"{(session.evaluation or session.error or '')[:200]!r}"
        )
    for name, session in outcome.items():
        assert session.status == SessionStatus.COMPLETED, (name, session)
        want = 1.0 if name.startswith("honest") else 0.0
        assert session.reward == want, (name, evidence(stack.storage, session))
    for name in ("grade_view (swebench)", "grade_view (command)"):
        views = grade_views(stack.storage, outcome[name])
        assert views, (name, evidence(stack.storage, outcome[name]))
        for view in views:
            shown = {k: view[k] for k in ("fds", "cmdline", "parent_cmdline", "folders")}
            shown["parent_environ"] = str(view["parent_environ"])[:60]
            print(f"GRADE-VIEW | {name} | {kind} | {json.dumps(shown)[:3000]}")
            assert_grade_unseen(view, swebench="swebench" in name)
        print(f"GRADE-VIEW | {name} | {kind} | {len(views)} views, none names the grade")


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="the in-process trust that remains (docs/threat-model.md): code under test writes "
    "forged records to the plugin's pipe and exits 0; an XPASS means it was closed",
)
async def test_a_forged_record_stream_is_the_known_residual(
    sealed_stack: SealedStack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """`pipe_forge` on `local`: a wrong fix, and reward 1 today (measured 2026-12-03)."""
    kind = "local"
    repo, sha = task_repo(sealed_stack, kind, tmp_path)
    spec = attack_spec(
        f"advg-forge-{uuid.uuid4().hex[:6]}",
        repo,
        sha,
        runtime_spec(kind, request),
        swebench_evaluator(sha),
        {"ATTACK_GRADING": "pipe_forge"},
        harness=HARNESS,
    )
    session = await one_session(sealed_stack.polar, spec)
    print(f"GRADING-ROW | pipe_forge (swebench) | {kind} | {session.reward} | {session.evaluation}")
    if session.status != SessionStatus.COMPLETED:  # not the residual: a broken run fails
        raise RuntimeError(f"the session did not complete: {session}")
    assert session.reward == 0.0, evidence(sealed_stack.storage, session)

"""Grading, attacked from the code being graded (issue 21): every attack is a real session.

The harness (tests/support/adversary/attacks_grading.py) makes a WRONG fix plus one attack
that runs later, inside the evaluator's test run: code the test imports writes the command
evaluator's reward file; code under test rewrites the pytest results file at exit and calls
`os._exit(0)`; a root-level `iniconfig.py` shadows pytest's dependency and adds an in-memory
plugin; package code monkeypatches `_pytest.reports`; and, for a command evaluator without
`protected`, the harness rewrites the test its command names and adds a conftest. Each must
end with reward 0 while the honest fix gets 1, on every sealed runtime.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from polar.records import SessionStatus
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
        "command_unprotected (command)": (
            {"kind": "command", "command": PYTEST_CHECK},
            {"ATTACK_GRADING": "command_unprotected"},
        ),
    }


@pytest.mark.parametrize("kind", ["docker", "podman", "local", "bwrap"])
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

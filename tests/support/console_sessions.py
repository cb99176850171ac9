"""Real sessions for the console's tests: the demo repo, a task spec, one session run.

The console's integration test (tests/integration/test_console.py) and its browser test
(tests/system/test_console_browser.py) run tasks of one session each on the scripted
stack (tests/support/scripted_stack.py) and read the console's pages of them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from polar.contracts import SessionResult
from polar.tasks.spec import TaskSpec
from tests.support.scripted_stack import ScriptedStack

REPO = Path(__file__).resolve().parents[2]
DEMO_REPO = REPO / "examples" / "demo" / "repo"

# one chat completion through the session's gateway URL; exit 1 when it is not served
CALL_MODEL_ONCE = (
    "python3 -c 'import json, os, sys, urllib.request, urllib.error\n"
    'body = json.dumps({"model": os.environ["POLAR_MODEL"], '
    '"messages": [{"role": "user", "content": "hi"}]}).encode()\n'
    'request = urllib.request.Request(os.environ["POLAR_BASE_URL"] + "/chat/completions", '
    'body, {"content-type": "application/json", '
    '"authorization": "Bearer " + os.environ["POLAR_API_KEY"]})\n'
    "try:\n"
    "    urllib.request.urlopen(request, timeout=30)\n"
    "except urllib.error.HTTPError as exc:\n"
    '    sys.exit(f"model call failed: {exc.code}")\n'
    "'"
)


def demo_repo(folder: Path) -> Path:
    """A copy of the demo's repo (its `agent.py` talks to the model) under `folder`."""
    repo = folder / "repo"
    shutil.copytree(DEMO_REPO, repo)
    repo.chmod(0o755)
    return repo


def console_spec(task_id: str, command: str, repo: Path, **fields: Any) -> TaskSpec:
    """One session of the `command` harness on `repo`, graded by `test -s answer.txt`
    (`fields` replace the spec's top-level fields)."""
    return TaskSpec.model_validate(
        {
            "task_id": task_id,
            "instruction": "Write a haiku about rollouts to answer.txt.",
            "num_sessions": 1,
            "source": {"type": "dir", "path": str(repo)},
            "harness": {
                "kind": "command",
                "command": command,
                "env": {"DEMO_TURNS": "2", "DEMO_STREAM_TURNS": ""},
            },
            "builder": {"name": "per_request"},
            "evaluator": {"kind": "command", "command": "test -s answer.txt"},
            "timeouts": {"harness_s": 120, "evaluate_s": 120},
        }
        | fields
    )


async def run_one(stack: ScriptedStack, spec: TaskSpec) -> tuple[str, SessionResult]:
    """Submit `spec` to the stack and wait: its workflow id and its one session's result."""
    run = await stack.polar.submit(spec)
    result = await stack.polar.wait(run, timeout_s=180)
    return run.workflow_id, result.sessions[0]

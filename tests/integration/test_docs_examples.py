"""The docs' code examples run: the quick tour (CLI) and the SDK snippet, as written.

Each example is a fenced block with a title (```bash title="quick tour"```) in
README.md or a page of docs/ (the site includes the README's blocks rather than
copying them). They run against the suite's Temporal and S3 with a worker, the
real gateway and a scripted model (tests/support/scripted_stack.py), from a
directory holding the checkout's `examples/`. The tour's `polar dev up|status|down`
lines start the embedded stack itself (vLLM included): they are the only lines
not run here, and tests/system/test_dev_stack.py covers them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from polar.records import SessionStatus
from polar.settings import Settings
from tests.support.doc_blocks import REPO, doc_block
from tests.support.scripted_backend import text
from tests.support.scripted_stack import ScriptedStack, running_scripted_stack

DEMO_CALLS = 3 * 4  # the demo task: 4 sessions of a 3-turn agent


@pytest.fixture(scope="module")
async def stack(devstack: object, base_settings: Settings) -> AsyncIterator[ScriptedStack]:
    replies = [text(f"Rollouts {i} turn; the policy learns.") for i in range(4 * DEMO_CALLS)]
    async with running_scripted_stack(base_settings, replies) as running:
        yield running


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A user's directory: the checkout's examples/, and room for what a command writes."""
    (tmp_path / "examples").symlink_to(REPO / "examples")
    return tmp_path


def run_env(stack: ScriptedStack) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLAR_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env | stack.env()


# `polar dev up|status|down` manage the embedded stack (with vLLM): not run against the suite's
SKIP_DEV = """polar() {
  case "$1 $2" in
    "dev up"|"dev status"|"dev down") echo "(not run here: polar $*)" ;;
    *) command polar "$@" ;;
  esac
}
"""


async def test_the_quick_tour_runs_as_written(stack: ScriptedStack, workdir: Path) -> None:
    tour = doc_block("quick tour", "bash")
    assert "polar submit examples/demo/task.json" in tour
    calls_before = len(stack.backend.requests)
    script = f'set -euo pipefail\n{SKIP_DEV}{tour}\necho "RUN=$run"\n'
    proc = await _run(["bash", "-c", script], workdir, run_env(stack), timeout_s=600)
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out[-4000:]}\n{proc.stderr[-4000:]}"
    assert "(not run here: polar dev up)" in out and "(not run here: polar dev down)" in out

    # the submitted task ran 4 sessions, graded and traced, each of the demo's 3 calls
    # recorded through the gateway (twice: `submit` and `submit --no-wait`)
    assert len(stack.backend.requests) - calls_before == 2 * DEMO_CALLS
    run = re.findall(r"^RUN=(\S+)$", out, flags=re.MULTILINE)[-1]
    assert run.startswith("task-demo-haiku-")
    lines = out.splitlines()
    start = lines.index("{")  # `polar result --json`: the TaskResult, indented
    result = json.loads("\n".join(lines[start : lines.index("}", start) + 1]))
    assert result["task_id"] == "demo-haiku" and len(result["sessions"]) == 4
    for session in result["sessions"]:
        assert session["status"] == SessionStatus.COMPLETED.value, session
        assert session["reward"] == 1.0 and session["num_completions"] == 3, session
    assert "mean reward: 1.000" in out  # the followed `polar submit`'s table
    assert f"RolloutTask {run}" in out  # `polar replay` (a failed replay exits 1)
    traces = (workdir / "traces" / "traces.jsonl").read_text().splitlines()
    assert len(traces) == DEMO_CALLS  # per_request: one trace per call
    for name in ("sft.jsonl", "verl.parquet", "trl.jsonl", "slime.jsonl"):
        assert (workdir / "traces" / name).stat().st_size > 0, name


async def test_the_sdk_snippet_runs_as_written(stack: ScriptedStack, workdir: Path) -> None:
    snippet = doc_block("sdk", "python")
    assert "PolarClient.connect()" in snippet
    (workdir / "snippet.py").write_text(snippet)
    # top-level await, as in `python -m asyncio` or a notebook
    runner = (
        "import ast, asyncio; "
        "code = compile(open('snippet.py').read(), 'snippet.py', 'exec', "
        "flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT); "
        "result = eval(code, {'__name__': '__main__'}); "
        "asyncio.run(result) if result is not None else None"
    )
    calls_before = len(stack.backend.requests)
    proc = await _run([sys.executable, "-c", runner], workdir, run_env(stack), timeout_s=600)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert len(stack.backend.requests) - calls_before == DEMO_CALLS
    lines = [line.split() for line in proc.stdout.splitlines()]
    # per session id, its reward, prompt length and trained tokens: 3 traces per session
    assert len(lines) == DEMO_CALLS, proc.stdout
    sessions = {fields[0] for fields in lines}
    assert len(sessions) == 4 and all(s.startswith("demo-haiku-") for s in sessions)
    for _, reward, prompt_len, trained in lines:
        assert float(reward) == 1.0 and int(prompt_len) > 0 and int(trained) > 0


async def _run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run a command without blocking the event loop the in-process worker serves on."""
    import asyncio

    return await asyncio.to_thread(
        subprocess.run, argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
    )

"""`polar show`, `polar logs` and `polar result SESSION` over real sessions: a scripted model
behind the real gateway, a worker, the suite's Temporal and S3; the commands run as the
user runs them (`python -m app.cli`, its environment pointing at the stack). The model's
replies and the harness's output carry terminal control sequences, which reach stdout only
escaped; an unknown id is one line on stderr and exit 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from polar.contracts import SessionResult
from polar.settings import Settings
from tests.support.console_sessions import console_spec, demo_repo, run_one
from tests.support.scripted_backend import text
from tests.support.scripted_stack import ScriptedStack, running_scripted_stack

REPO = Path(__file__).resolve().parents[2]
ATTACK = "\x1b]0;owned\x07\x1b[2J\x1b[31m\r\x9b31m\u202e"
"""A window title, a screen clear, a colour, a carriage return, a C1 CSI, a bidi override."""
PRINTF_ESCAPED = "\\x1b]0;owned\\x07\\x1b[2J\\x1b[31m\\x0d"
ESCAPED = PRINTF_ESCAPED + "\\x9b31m\\u202e"
REPLIES = [text(f"Turn {i} of the haiku. {ATTACK}") for i in range(8)]
PRINTF_ATTACK = "printf '\\033]0;owned\\007\\033[2J\\033[31m\\r'"
OK_AGENT = f"{PRINTF_ATTACK}; echo ' harness out'; python agent.py"
FAILING_AGENT = f"python agent.py; {PRINTF_ATTACK} >&2; echo ' agent gave up' >&2; exit 3"


@dataclass
class Ran:
    stack: ScriptedStack
    ok: tuple[str, SessionResult]
    failed: tuple[str, SessionResult]


EVALUATOR = {"kind": "command", "command": "echo graded it; test -s answer.txt"}
"""The console sessions' grading, saying so on its stdout (what `polar logs` prints)."""


@pytest.fixture(scope="module")
async def ran(
    devstack: object, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Ran]:
    repo = demo_repo(tmp_path_factory.mktemp("session-commands"))
    suffix = uuid.uuid4().hex[:6]
    async with running_scripted_stack(base_settings, REPLIES) as stack:
        outcomes = []
        for task_id, command in (
            (f"cli-ok-{suffix}", OK_AGENT),
            (f"cli-fail-{suffix}", FAILING_AGENT),
        ):
            spec = console_spec(task_id, command, repo, evaluator=EVALUATOR)
            outcomes.append(await run_one(stack, spec))
        yield Ran(stack, outcomes[0], outcomes[1])


async def polar(ran: Ran, *args: str) -> subprocess.CompletedProcess[str]:
    """`polar ARGS` as a user runs it, pointed at the test stack."""
    env = {**os.environ, **ran.stack.env()}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def printed(done: subprocess.CompletedProcess[str]) -> str:
    """stdout of a command that succeeded, checked to hold no raw control character."""
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out and "\x9b" not in out
    assert "\u202e" not in out
    return out


async def test_show_prints_the_conversation_tokens_reward_and_outcome(ran: Ran) -> None:
    _, session = ran.ok
    out = printed(await polar(ran, "show", session.session_id))
    assert out.startswith(f"session {session.session_id}\n")
    assert "status completed (workflow completed) · outcome ok · reward 1\n" in out
    assert f"calls {session.num_completions}\n" in out
    for n in range(session.num_completions):
        assert f"── call {n} · openai_chat · " in out
    assert "finish stop" in out and "· trained\n" in out
    assert "user: Write a haiku about rollouts" in out  # who said what
    assert f"assistant: Turn 0 of the haiku. {ESCAPED}" in out  # the model's text, escaped
    traces = out[out.index("\ntraces ") :]
    assert "trained tokens 0" not in traces.splitlines()[1]
    assert "· reward 1 ·" in traces


async def test_logs_print_each_stage_s_stdout_and_stderr(ran: Ran) -> None:
    _, ok = ran.ok
    out = printed(await polar(ran, "logs", ok.session_id))
    assert "==> run · harness-attempt1.stdout <==\n" + PRINTF_ESCAPED in out
    assert " harness out" in out
    assert "==> evaluate · " in out and "graded it" in out
    assert out.index("==> run") < out.index("==> evaluate")
    evaluator_only = printed(await polar(ran, "logs", ok.session_id, "--stage", "evaluate"))
    assert "==> run" not in evaluator_only and "graded it" in evaluator_only


async def test_a_failed_session_s_logs_say_why(ran: Ran) -> None:
    _, failed = ran.failed
    out = printed(await polar(ran, "logs", failed.session_id, "--stage", "run"))
    assert "==> run · harness-attempt1.stderr <==\n" in out
    assert f"{PRINTF_ESCAPED} agent gave up" in out
    assert "==> evaluate" not in out


async def test_result_of_a_session_prints_it_and_its_json(ran: Ran) -> None:
    _, session = ran.ok
    out = printed(await polar(ran, "result", session.session_id))
    assert out.startswith(f"session {session.session_id} (task {session.task_id}, index 0)\n")
    assert "status completed · outcome ok · reward 1\n" in out
    as_json = printed(await polar(ran, "result", session.session_id, "--json"))
    assert SessionResult.model_validate(json.loads(as_json)) == session
    task_wf, _ = ran.failed
    task_out = printed(await polar(ran, "result", task_wf))
    assert "harness_failed" in task_out and "mean reward" in task_out


@pytest.mark.parametrize(
    "args",
    [
        ("show", "no-such-session-s0"),
        ("logs", "no-such-session-s0"),
        ("result", "no-such-session-s0"),
        ("show", "../etc"),
    ],
    ids=lambda a: "-".join(a),
)
async def test_an_unknown_session_is_one_line_and_exit_1(ran: Ran, args: tuple[str, ...]) -> None:
    done = await polar(ran, *args)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("polar: ")
    assert "Traceback" not in done.stderr

"""docs/errors.md's bad-input table, row by row (issue 37, items 3 and 4).

The table is read from the page; each row's case runs here: the CLI as the user runs it
(Typer's runner, its environment pointing at the suite's stack), the SDK against the suite's
Temporal, real sessions on the suite's worker where the worker decides (a missing source
dir, a CLI harness started without its instruction), and the real workflows with stub
activities where a stage must fail as the stack fails (test_workflow_branches' `Stubs`): a
missing image, a sandbox that never reached the harness, a task cancelled before any session
ended (one case runs `polar` as its own process: the exit code a shell sees). Each case
gives what was printed (or raised) and the exit code or status, which must hold the row's
message and equal its last column. A row without a case, or a case without
a row, fails the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from typer.testing import CliRunner

from activities.runtimes.base import image_missing
from app.cli import app
from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.client.submit_checks import NoSourceWarning
from polar.contracts import HarnessRequest, HarnessResult, PrepareRequest, SessionResult
from polar.ids import InvalidId
from polar.tasks.spec import TaskSpec
from polar.temporal_client import connect
from tests.integration.test_workflow_branches import Stubs, serving, task_spec, until_cancelled
from tests.support.doc_tables import Row, table_rows
from tests.support.paths import REPO
from tests.support.polling import wait_for

TABLE_HEADER = "| case | input | message | exit code or status |"
TRAVERSAL = "../../etc/passwd"
MISSING_IMAGE = "polar/no-such:1"


def flat(text: str) -> str:
    """`text` with its whitespace runs as one space and backticks gone (wrapped lines join)."""
    return re.sub(r"\s+", " ", text.replace("`", "")).strip()


@dataclass
class Stack:
    devstack: DevStack
    polar: PolarClient
    client: Client
    dir: Path

    def env(self) -> dict[str, str]:
        return self.devstack.env()

    def task_file(self, **fields: Any) -> Path:
        """A task file of a fresh id: `command` harness `true` on the local runtime, sourceless
        by choice (`"source": null`), overridden by `fields`."""
        task = {
            "task_id": f"bad-{uuid.uuid4().hex[:8]}",
            "instruction": "say hi",
            "source": None,
            "runtime": {"kind": "local"},
            "harness": {"kind": "command", "command": "true"},
            "timeouts": {"max_attempts": 2},
        } | fields
        path = self.dir / f"{task['task_id']}.json"
        path.write_text(json.dumps({k: v for k, v in task.items() if v is not ...}))
        return path

    async def cli(self, *args: str) -> tuple[str, int]:
        """`polar ARGS` (stdout and stderr together) and its exit code."""
        result = await asyncio.to_thread(
            CliRunner().invoke, app, list(args), env=self.env(), catch_exceptions=False
        )
        return result.output, result.exit_code

    async def process(self, *args: str) -> tuple[str, str, int]:
        """`python -m app.cli ARGS` as its own process (the code it really exits with): its
        stdout, stderr and exit code."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("POLAR_")} | self.env()
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "app.cli", *args],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return done.stdout, done.stderr, done.returncode


Case = Callable[[Stack], Awaitable[tuple[str, str]]]
CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Case], Case]:
    def register(run: Case) -> Case:
        CASES[name] = run
        return run

    return register


async def attempts(client: Client, workflow_id: str, activity: str) -> int:
    """The most attempts any run of `activity` took in the workflow's history."""
    most = 0
    scheduled: set[int] = set()
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == activity:
                scheduled.add(event.event_id)
        elif event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            if started.scheduled_event_id in scheduled:
                most = max(most, started.attempt)
    return most


def exit_status(code: int) -> str:
    return f"exit {code}"


def session_status(code: int, session: SessionResult, retries: str) -> str:
    outcome = session.outcome
    assert outcome is not None
    return f"exit {code}; session {outcome.outcome.value} ({session.error_type}), {retries}"


# ---------------------------------------------------------------- refused by the CLI
@case("file-unreadable")
async def _(stack: Stack) -> tuple[str, str]:
    out, code = await stack.cli("submit", "--no-wait", str(stack.dir / "missing.json"))
    return out, exit_status(code)


@case("file-not-json")
async def _(stack: Stack) -> tuple[str, str]:
    path = stack.dir / "not-json.json"
    path.write_text("{not json")
    out, code = await stack.cli("submit", "--no-wait", str(path))
    return out, exit_status(code)


@case("unknown-harness")
async def _(stack: Stack) -> tuple[str, str]:
    path = stack.task_file(harness={"kind": "aider"})
    out, code = await stack.cli("submit", "--no-wait", str(path))
    return out, exit_status(code)


@case("no-instruction")
async def _(stack: Stack) -> tuple[str, str]:
    path = stack.task_file(instruction=..., harness={"kind": "codex"})
    out, code = await stack.cli("submit", "--no-wait", str(path))
    return out, exit_status(code)


@case("workflow-id-submit")
async def _(stack: Stack) -> tuple[str, str]:
    path = stack.task_file()
    out, code = await stack.cli("submit", "--no-wait", "--workflow-id", TRAVERSAL, str(path))
    return out, exit_status(code)


@case("workflow-id-lookup")
async def _(stack: Stack) -> tuple[str, str]:
    status_out, status_code = await stack.cli("status", TRAVERSAL)
    assert status_code == 1 and "not found: invalid workflow id" in status_out, status_out
    out, code = await stack.cli("result", TRAVERSAL)
    return out, exit_status(code)


@case("unknown-workflow")
async def _(stack: Stack) -> tuple[str, str]:
    out, code = await stack.cli("result", "no-such-task")
    return out, exit_status(code)


@case("no-source")
async def _(stack: Stack) -> tuple[str, str]:
    path = stack.task_file(source=...)
    out, code = await stack.cli("submit", "--no-wait", str(path))
    workflow_id = out.strip().splitlines()[-1]
    await stack.polar.wait(workflow_id, timeout_s=120)  # submitted: it ran
    return out, f"warning; exit {code}"


# ---------------------------------------------------------------- refused by the SDK
@case("no-source-sdk")
async def _(stack: Stack) -> tuple[str, str]:
    spec = TaskSpec.model_validate(json.loads(stack.task_file(source=...).read_text()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = await stack.polar.submit(spec)
    [warned] = [w for w in caught if issubclass(w.category, NoSourceWarning)]
    await stack.polar.wait(run, timeout_s=120)
    return str(warned.message), "NoSourceWarning; submitted"


@case("workflow-id-sdk")
async def _(stack: Stack) -> tuple[str, str]:
    spec = TaskSpec.model_validate(json.loads(stack.task_file().read_text()))
    with pytest.raises(InvalidId) as refused:
        await stack.polar.submit(spec, workflow_id=TRAVERSAL)
    with pytest.raises(RPCError, match="not found"):  # nothing was started
        await stack.client.get_workflow_handle(TRAVERSAL).describe()
    assert isinstance(refused.value, ValueError)
    return str(refused.value), "InvalidId (a ValueError); nothing started"


# ---------------------------------------------------------------- decided by the worker
@case("no-instruction-worker")
async def _(stack: Stack) -> tuple[str, str]:
    spec = json.loads(stack.task_file(instruction=..., harness={"kind": "codex"}).read_text())
    run = await stack.polar.submit(spec)  # the SDK holds no harness kinds: the worker refuses
    out, code = await stack.cli("result", run.workflow_id)
    [session] = (await stack.polar.wait(run)).sessions
    tries = await attempts(stack.client, session.session_id, "run_harness")
    return out, session_status(code, session, "not retried" if tries == 1 else f"{tries} tries")


@case("missing-source-dir")
async def _(stack: Stack) -> tuple[str, str]:
    gone = stack.dir / "gone"
    path = stack.task_file(source={"type": "dir", "path": str(gone)})
    out, err, code = await stack.process("submit", "--json", str(path))
    assert "Traceback" not in err, err
    result = json.loads(out)  # stdout: the one task's line of JSON, nothing else
    assert (result["verdict"], result["exit_code"]) == ("task_error", code), result
    [session] = [SessionResult.model_validate(s) for s in result["sessions"]]
    tries = await attempts(stack.client, session.session_id, "prepare_runtime")
    return out, session_status(code, session, "not retried" if tries == 1 else f"{tries} tries")


# ---------------------------------------------------------------- stages failing as the stack fails
async def _stub_task(stack: Stack, stubs: Stubs, name: str, **extra: Any) -> str:
    """Run a task of the stub stages to its end; its workflow id."""
    spec = task_spec(name, **extra)
    async with serving(stack.client, stubs) as queue:
        await stack.client.execute_workflow(
            "RolloutTask", spec.model_dump(mode="json"), id=spec.task_id, task_queue=queue
        )
    return spec.task_id


@case("image-missing")
async def _(stack: Stack) -> tuple[str, str]:
    stubs = Stubs()
    missing = image_missing("docker", MISSING_IMAGE, "build it there")

    async def no_image(request: PrepareRequest, attempt: int) -> None:
        # as init_activities raises it: the runtime's error by its class name, left to the
        # retry policy (no non_retryable flag of its own)
        raise ApplicationError(str(missing), type=type(missing).__name__)

    stubs.script["prepare_runtime"] = no_image
    workflow_id = await _stub_task(stack, stubs, "image", timeouts={"max_attempts": 3})
    out, code = await stack.cli("result", workflow_id)
    [session] = (await stack.polar.wait(workflow_id)).sessions
    prepared = len(stubs.attempts("prepare_runtime"))
    times = "prepared once" if prepared == 1 else f"prepared {prepared} times"
    return out, session_status(code, session, times)


@case("infra-error")
async def _(stack: Stack) -> tuple[str, str]:
    stubs = Stubs()

    async def never_started(request: HarnessRequest, attempt: int) -> HarnessResult:
        return HarnessResult(
            status="failed",
            exit_code=1,
            duration_s=0.1,
            stdout_key="stub/out",
            stderr_key="stub/err",
            attempt=request.attempt_base + attempt,
            harness_started=False,
        )

    stubs.script["run_harness"] = never_started
    workflow_id = await _stub_task(stack, stubs, "infra", infra_errors={"retries": 0})
    out, code = await stack.cli("result", workflow_id)
    [session] = (await stack.polar.wait(workflow_id)).sessions
    assert session.outcome is not None
    return out, f"exit {code}; session {session.outcome.outcome.value}"


@case("spec-refused-by-workflow")
async def _(stack: Stack) -> tuple[str, str]:
    """`temporal workflow start` of an invalid spec: the task's workflow and a session's
    refuse it (InvalidTaskSpec, InvalidSessionSpec) before any stage: the task's error."""
    outs, codes = [], set()
    bad_task = {"task_id": "../x", "harness": {"kind": "command", "command": "true"}}
    bad_session = {"session_id": "../x", "index": 0, "task": bad_task | {"task_id": "t"}}
    for workflow, spec in (("RolloutTask", bad_task), ("Session", bad_session)):
        workflow_id = f"refused-{uuid.uuid4().hex[:8]}"
        handle = await stack.client.start_workflow(
            workflow, spec, id=workflow_id, task_queue=stack.polar.settings.task_queue
        )
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        out, code = await stack.cli("result", workflow_id)
        outs.append(out)
        codes.add(code)
    [code] = codes
    return "\n".join(outs), exit_status(code)


@case("none-completed")
async def _(stack: Stack) -> tuple[str, str]:
    stubs = Stubs(script={"prepare_runtime": until_cancelled})
    spec = task_spec("none")
    async with serving(stack.client, stubs) as queue:
        handle = await stack.client.start_workflow(
            "RolloutTask", spec.model_dump(mode="json"), id=spec.task_id, task_queue=queue
        )
        await wait_for(lambda: bool(stubs.sessions_of("prepare_runtime")), 30, "preparing")
        await handle.cancel()
        out, code = await stack.cli("result", spec.task_id)
    return out, exit_status(code)


# ---------------------------------------------------------------- the table
ROWS = table_rows(TABLE_HEADER)


@pytest.fixture(scope="module")
async def stack(
    devstack: DevStack, polar: PolarClient, tmp_path_factory: pytest.TempPathFactory
) -> Stack:
    return Stack(devstack, polar, await connect(devstack.settings), tmp_path_factory.mktemp("bad"))


def test_every_row_has_a_case_and_every_case_a_row() -> None:
    cases = [r.case for r in ROWS]
    assert len(cases) == len(set(cases)), cases
    assert set(cases) == set(CASES), sorted(set(CASES) ^ set(cases))


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.case)
async def test_the_row_holds(row: Row, stack: Stack) -> None:
    text, status = await CASES[row.case](stack)
    assert flat(row.message) in flat(text), text[-3000:]
    assert flat(row.status) == flat(status), text[-3000:]
    assert "Traceback" not in text


# ---------------------------------------------------------------- and a good task's verdict
async def test_a_good_task_exits_0_and_its_json_says_ok(stack: Stack) -> None:
    """`--json` is one line per task and nothing else on stdout; `--workflow-id` names the
    task's workflow; `polar result --json` prints the same, indented."""
    workflow_id = f"verdict-ok-{uuid.uuid4().hex[:8]}"
    path = stack.task_file()
    out, code = await stack.cli("submit", "--json", "--workflow-id", workflow_id, str(path))
    assert code == 0, out
    [line] = out.strip().splitlines()
    submitted = json.loads(line)
    assert (submitted["verdict"], submitted["exit_code"]) == ("ok", 0)
    assert submitted["sessions"][0]["status"] == "completed"
    out, code = await stack.cli("result", "--json", workflow_id)
    assert code == 0 and json.loads(out) == submitted, out
    text, code = await stack.cli("result", workflow_id)
    assert code == 0 and "verdict: ok (exit 0)" in text, text


async def test_no_wait_json_names_what_it_started(stack: Stack) -> None:
    out, code = await stack.cli("submit", "--no-wait", "--json", str(stack.task_file()))
    assert code == 0, out
    started = json.loads(out)
    assert set(started) == {"task_id", "workflow_id"}
    await stack.polar.wait(started["workflow_id"], timeout_s=120)

"""Every outcome class, each made to happen for real on the real stack (issue 22).

Temporal, SeaweedFS and a worker on its own task queue whose harnesses call a real
gateway; sessions run the `command` harness in the sealed `local` runtime:

* a harness that exits 0 is `ok`, one that exits 3 is `policy_failure`;
* one that runs past its budget is `timeout`;
* one whose model calls the gateway cannot serve (its only inference replica is dead)
  and that then gives up is `infra_error` (`inference_backend`): run again on fresh
  ground up to the task's `infra_errors.retries`, its earlier attempts' records apart,
  and in the end no reward (never 0); `PolarOutcome` finds it in visibility;
* a task whose image lacks what the sandbox needs is `infra_error` (`image`, refused at
  prepare) in tests/system/test_infra_faults.py.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from polar.client.sdk import PolarClient
from polar.contracts import SessionResult
from polar.records import InfraReason, OutcomeClass
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import TaskSpec
from proxy.app import create_app
from tests.support.polling import wait_for
from tests.support.ports import refusing_port
from tests.support.scripted_backend import serve_app

# one chat completion through the session's gateway URL; exit 1 when it is not served
CALL_MODEL = (
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


@contextlib.asynccontextmanager
async def dead_backend_stack(base: Settings) -> AsyncIterator[PolarClient]:
    """A real gateway whose one inference replica refuses connections, and a worker on its
    own queue whose harnesses call that gateway."""
    from activities.worker import build_workers
    from polar.temporal_client import connect

    with contextlib.ExitStack() as threads:
        dead = threads.enter_context(refusing_port())
        upstream = f"http://127.0.0.1:{dead}/v1"
        gw_settings = base.model_copy(update={"upstream_urls": upstream})
        gateway = threads.enter_context(serve_app(create_app(gw_settings, Storage(gw_settings))))
        settings = base.model_copy(
            update={
                "task_queue": f"polar-outcomes-{uuid.uuid4().hex[:8]}",
                "gateway_url": gateway,
                "upstream_urls": upstream,
            }
        )
        client = await connect(settings)
        async with contextlib.AsyncExitStack() as workers:
            for worker in build_workers(client, settings):
                await workers.enter_async_context(worker)
            yield PolarClient(client, settings)


@pytest.fixture(scope="module")
async def outcomes_polar(devstack: Any) -> AsyncIterator[PolarClient]:
    async with dead_backend_stack(devstack.settings) as polar:
        yield polar


async def run_session(
    polar: PolarClient, tmp_path: Path, command: str, **fields: Any
) -> SessionResult:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "README").write_text("nothing\n")
    spec = TaskSpec.model_validate(
        {
            "task_id": f"outcome-{uuid.uuid4().hex[:8]}",
            "instruction": "do it",
            "source": {"type": "dir", "path": str(repo)},
            "runtime": {"kind": "local"},
            "harness": {"kind": "command", "command": command},
            "timeouts": {"harness_s": 60, "heartbeat_s": 20, "max_attempts": 1},
        }
        | fields
    )
    result = await polar.wait(await polar.submit(spec), timeout_s=600)
    [session] = result.sessions
    assert result.outcome_counts.get(session.outcome.outcome.value if session.outcome else "") == 1
    return session


def outcome_of(session: SessionResult) -> tuple[OutcomeClass, InfraReason | None]:
    assert session.outcome is not None, session
    return session.outcome.outcome, session.outcome.reason


async def test_a_harness_that_ran_is_judged_on_its_exit(
    outcomes_polar: PolarClient, tmp_path: Path
) -> None:
    ok = await run_session(outcomes_polar, tmp_path, "true")
    assert outcome_of(ok) == (OutcomeClass.OK, None)
    assert ok.harness_started is True
    failed = await run_session(outcomes_polar, tmp_path, "exit 3")
    assert outcome_of(failed) == (OutcomeClass.POLICY_FAILURE, None), failed
    assert failed.harness_started is True and failed.unserved_calls == 0


async def test_a_harness_past_its_budget_is_a_timeout(
    outcomes_polar: PolarClient, tmp_path: Path
) -> None:
    slow = await run_session(
        outcomes_polar,
        tmp_path,
        "sleep 60",
        timeouts={"harness_s": 2, "heartbeat_s": 20, "max_attempts": 1},
    )
    assert outcome_of(slow) == (OutcomeClass.TIMEOUT, None), slow


async def test_a_dead_inference_backend_is_an_infra_error_retried_and_never_scored(
    outcomes_polar: PolarClient, storage: Storage, tmp_path: Path
) -> None:
    starved = await run_session(
        outcomes_polar, tmp_path, CALL_MODEL, infra_errors={"group": "wait", "retries": 1}
    )
    assert outcome_of(starved) == (OutcomeClass.INFRA_ERROR, InfraReason.INFERENCE_BACKEND), starved
    assert starved.harness_started is True and starved.unserved_calls == 1
    assert starved.reward is None  # never 0
    # run again once on fresh ground; each run's failed call recorded under its own attempt
    assert len(starved.infra_attempts) == 1
    assert starved.infra_attempts[0].startswith("infra_error:inference_backend")
    records = storage.list_completions(starved.session_id)
    assert len(records) == 2 and len({r.attempt for r in records}) == 2
    assert all(r.status_code == 502 for r in records)

    async def found() -> bool:
        label = "infra_error:inference_backend"
        query = f"PolarOutcome = '{label}' AND WorkflowId = '{starved.session_id}'"
        return [e async for e in outcomes_polar.client.list_workflows(query)] != []

    await wait_for(found, 30, "the session by PolarOutcome in visibility")


async def test_shrink_runs_nothing_again(outcomes_polar: PolarClient, tmp_path: Path) -> None:
    starved = await run_session(
        outcomes_polar, tmp_path, CALL_MODEL, infra_errors={"group": "shrink"}
    )
    assert outcome_of(starved) == (OutcomeClass.INFRA_ERROR, InfraReason.INFERENCE_BACKEND)
    assert starved.infra_attempts == []

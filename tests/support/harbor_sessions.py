"""A Harbor task dir run as one real Polar session with the `command` harness."""

from __future__ import annotations

import uuid
from pathlib import Path

from polar.client.sdk import PolarClient
from polar.contracts import SessionResult
from polar.records import SessionStatus
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.spec import HarnessSpec


async def harbor_session(
    polar: PolarClient,
    task: Path,
    command: str,
    kind: str,
    name: str,
    timeout_s: float = 400,
    status: SessionStatus = SessionStatus.COMPLETED,
) -> SessionResult:
    """`task` loaded with `command` as its agent, on runtime `kind` (one attempt): its
    session, ended with `status` (printed for the log: `{name}: status reward evaluation`)."""
    (spec,) = load_harbor_tasks(task, harness=HarnessSpec(kind="command", command=command))
    spec = spec.model_copy(
        update={
            "task_id": f"{name}-{uuid.uuid4().hex[:6]}",
            "runtime": spec.runtime.model_copy(update={"kind": kind}),
            "timeouts": spec.timeouts.model_copy(update={"max_attempts": 1}),
        }
    )
    (session,) = (await polar.wait(await polar.submit(spec), timeout_s=timeout_s)).sessions
    print(f"{name}: {session.status} {session.reward} {session.evaluation}")
    assert session.status == status, (session.status, session.error, session.steps)
    return session

"""The identity a run gets: its key expires with the run's budget, and a traversal task id
never starts one.

On the real stack (Temporal dev server, SeaweedFS, a worker in this process): a
one-session task whose `command` harness makes one call through the real gateway
app, in front of a scripted backend. The gateway is wrapped to keep each
request's headers, so the key the worker minted for the run (sent by the harness,
or stamped by the session's channel when the runtime is sealed) is read back and
verified with the deployment's secret. A `RolloutTask` started directly (as
`temporal workflow start` would) with a `../` task id fails on its first workflow
task, before any activity.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.session_keys import (
    DEFAULT_TTL_S,
    EXPIRY_MARGIN_S,
    InvalidSessionKey,
    SessionIdentity,
    verify_session_key,
)
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import TaskSpec
from proxy.app import create_app
from proxy.auth import candidate_keys
from tests.support import scripted_backend, serve_app, text

HARNESS_S = 300.0
CALL = (
    'curl -sf "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" '
    "-H 'content-type: application/json' "
    '-d \'{"model":"p","messages":[{"role":"user","content":"hi"}]}\' > /dev/null'
)


class HeaderTap:
    """An ASGI wrapper that keeps the headers of every HTTP request, then serves `app`."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.headers: list[dict[str, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def tapped_gateway(devstack: DevStack) -> Iterator[tuple[str, HeaderTap, Settings]]:
    """The real gateway app over real S3 in front of a scripted backend, headers kept."""
    with scripted_backend([text(f"ok {i}") for i in range(10)]) as backend:
        settings = devstack.settings.model_copy(update={"upstream_urls": backend.url})
        tap = HeaderTap(create_app(settings))
        with serve_app(tap) as url:
            yield url, tap, settings


@pytest.fixture(scope="module")
async def polar(
    devstack: DevStack, tapped_gateway: tuple[str, HeaderTap, Settings]
) -> AsyncIterator[PolarClient]:
    from activities.worker import running_workers

    settings = devstack.settings.model_copy(
        update={
            "task_queue": f"polar-runid-{uuid.uuid4().hex[:8]}",
            "gateway_url": tapped_gateway[0],
        }
    )
    async with running_workers(settings):
        yield await PolarClient.connect(settings)


def _run_key_identity(headers: list[dict[str, str]], secret: str | None) -> SessionIdentity:
    """The one identity the model calls carried (every key a call sent that verifies)."""
    found = set()
    for request in headers:
        for key in candidate_keys(request):
            try:
                found.add(verify_session_key(key, secret))
            except InvalidSessionKey:
                continue  # the channel's placeholder key, when the runtime is sealed
    assert len(found) == 1, found
    return found.pop()


async def test_the_key_a_worker_mints_for_a_run_expires_with_its_budget(
    polar: PolarClient,
    tapped_gateway: tuple[str, HeaderTap, Settings],
    storage: Storage,
    tmp_path: Path,
) -> None:
    _, tap, settings = tapped_gateway
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("run identity\n")
    spec = TaskSpec.model_validate(
        {
            "task_id": f"runid-{uuid.uuid4().hex[:6]}",
            "source": {"type": "dir", "path": str(repo)},
            "harness": {"command": CALL},
            "timeouts": {"harness_s": HARNESS_S, "heartbeat_s": 5},
        }
    )
    tap.headers.clear()
    before = time.time()
    result = await polar.wait(await polar.submit(spec), timeout_s=120)
    after = time.time()
    (session,) = result.sessions
    assert session.status == "completed", session
    assert storage.count_completions(session.session_id) == 1

    identity = _run_key_identity(tap.headers, settings.session_secret)
    assert (identity.session_id, identity.task_id, identity.attempt) == (
        session.session_id,
        spec.task_id,
        1,
    )
    assert identity.expires_at is not None
    # minted when the run started: its budget plus the margin, not a hand-run key's day
    # (the payload keeps whole seconds)
    assert before + HARNESS_S + EXPIRY_MARGIN_S - 1 <= identity.expires_at
    assert identity.expires_at <= after + HARNESS_S + EXPIRY_MARGIN_S
    assert identity.expires_at < before + DEFAULT_TTL_S / 2


async def test_rollout_task_started_directly_with_a_traversal_task_id_fails_fast(
    polar: PolarClient,
) -> None:
    """`temporal workflow start --type RolloutTask` with a `../` task id: refused by the one
    id validator while the workflow decodes its input, non-retryable, no activity run."""
    handle = await polar.client.start_workflow(
        "RolloutTask",
        {"task_id": "../victim", "harness": {"command": "true"}},
        id=f"bad-task-id-{uuid.uuid4().hex[:6]}",
        task_queue=polar.settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidTaskSpec" and cause.non_retryable
    assert "task_id" in cause.message and "invalid task id '../victim'" in cause.message
    history = await handle.fetch_history()
    assert not [e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")]

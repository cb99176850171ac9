"""Ids become paths and S3 keys: a traversal id is refused at every boundary.

One validator (`polar.ids.checked_id`) serves the workflow input, the
storage key builders, each runtime's session dir and the gateway's key check.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from activities.runtimes import InvalidRuntime
from activities.runtimes.kinds.docker import DockerRuntime
from activities.runtimes.kinds.local import LocalRuntime
from polar import storage as keys
from polar.client.sdk import PolarClient
from polar.contracts import RuntimeHandle, SessionSpec
from polar.ids import InvalidId, checked_id
from polar.session_keys import (
    InvalidSessionKey,
    SessionIdentity,
    _b64,
    _mac,
    mint_session_key,
    verify_session_key,
)
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import TaskSpec
from tests.integration.test_gateway import MESSAGES, assert_openai_error, stack
from tests.support import text

TRAVERSAL = [
    "../../x",
    "..",
    "a/../../b",
    "/etc",
    "a/b",
    ".hidden",
    "-rf",
    "a..b",
    "",
    "a\nb",
    "x" * 201,
]


@pytest.mark.parametrize("bad", TRAVERSAL)
def test_checked_id_refuses_unsafe_ids(bad: str) -> None:
    with pytest.raises(InvalidId, match="invalid session id"):
        checked_id(bad, "session id")


def test_checked_id_keeps_real_ids() -> None:
    task = "t" * 128  # the longest task id, with what the workflow appends for its sessions
    for good in ("s1", "replay-098b2ffbb860-s0", f"{task}-098b2ffbb860-s1023-eval", "a.b_c-d"):
        assert checked_id(good) == good


@pytest.mark.parametrize("bad", ["../../x", "a/b", ".."])
def test_storage_keys_refuse_traversal_ids(bad: str) -> None:
    for build in (
        lambda: keys.session_prefix(bad),
        lambda: keys.completions_prefix(bad),
        lambda: keys.completion_key(bad, "r1"),
        lambda: keys.completion_key("s1", bad),
        lambda: keys.traces_key(bad, "per_request"),
        lambda: keys.artifact_key(bad, "log"),
        lambda: keys.task_result_key(bad),
    ):
        with pytest.raises(InvalidId, match="invalid"):
            build()
    for name in ("../log", "a/../../log", "/log", "a//b", "."):
        with pytest.raises(InvalidId, match="invalid artifact name"):
            keys.artifact_key("s1", name)
    assert keys.artifact_key("s1", "harness-attempt1/a.log") == (
        "sessions/s1/artifacts/harness-attempt1/a.log"
    )


@pytest.mark.parametrize("kind", [LocalRuntime, DockerRuntime])
async def test_runtime_session_dirs_refuse_traversal_ids(kind: type, tmp_path: Path) -> None:
    root = tmp_path / "data" / "runtimes"
    victim = tmp_path / "data" / "victim"
    (victim / "keep").mkdir(parents=True)
    runtime = kind(root)
    handle = RuntimeHandle(kind=runtime.kind, session_id="../victim", workdir="", host="h")
    for reach in (runtime.home, runtime.scratch, runtime.channel_dir):
        with pytest.raises(InvalidRuntime, match="invalid session id '../victim'"):
            reach(handle)
    with pytest.raises(InvalidRuntime, match="invalid session id"):
        runtime.log_paths(handle, "harness")
    if kind is LocalRuntime:  # docker's teardown asks the engine first
        with pytest.raises(InvalidRuntime):
            await runtime.teardown(handle)
    assert (victim / "keep").is_dir()


def _signed(session_id: str, task_id: str, secret: str) -> str:
    """A key signed with the real secret that names any ids (mint refuses unsafe ones)."""
    body = {"s": session_id, "t": task_id, "a": 1, "e": int(time.time()) + 3600}
    payload = _b64(json.dumps(body).encode())
    return f"pk-{payload}.{_mac(secret, payload)}"


def test_session_keys_refuse_traversal_ids() -> None:
    with pytest.raises(InvalidId):
        mint_session_key(SessionIdentity("../../x", "t"), "secret")
    with pytest.raises(InvalidId):
        mint_session_key(SessionIdentity("s1", "../t"), "secret")
    for key in (_signed("../../x", "t", "secret"), _signed("s1", "a/b", "secret")):
        with pytest.raises(InvalidSessionKey, match="invalid (session|task) id"):
            verify_session_key(key, "secret")
    assert verify_session_key(_signed("s1", "t", "secret"), "secret").session_id == "s1"


def test_gateway_refuses_a_signed_key_naming_a_traversal_id(
    base_settings: Settings, storage: Storage
) -> None:
    victim = f"victim-{uuid.uuid4().hex[:8]}"
    key = _signed(f"../sessions/{victim}", "task-gw", base_settings.session_secret)
    with stack(base_settings, [text("never")]) as (backend, gateway):
        chat = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": "p", "messages": MESSAGES},
            headers={"Authorization": f"Bearer {key}"},
        )
        anthropic = httpx.post(
            f"{gateway.url}/v1/messages",
            json={"model": "p", "max_tokens": 8, "messages": MESSAGES[1:]},
            headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        )
    assert chat.status_code == 401
    assert_openai_error(chat.json(), "invalid_api_key")
    assert anthropic.status_code == 401
    body = anthropic.json()
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error", body
    assert backend.requests == []
    assert storage.list_keys("sessions/..") == []
    assert storage.count_completions(victim) == 0


def test_session_spec_refuses_a_traversal_id() -> None:
    task = TaskSpec.model_validate({"task_id": "t", "harness": {"command": "true"}})
    with pytest.raises(ValueError, match="session_id"):
        SessionSpec(session_id="../../x", index=0, task=task)


async def test_session_started_directly_with_a_traversal_id_fails_fast(
    polar: PolarClient,
) -> None:
    """`temporal workflow start --type Session` with `../victim`: the workflow fails on its
    first task, non-retryable, before any activity (the docker runtime's prepare and teardown
    used to remove `{data_dir}/victim`)."""
    data_dir = Path(polar.settings.data_dir)
    victim = f"victim-{uuid.uuid4().hex[:8]}"
    (data_dir / victim / "keep").mkdir(parents=True)
    task = {"task_id": "t", "harness": {"command": "true"}, "runtime": {"kind": "docker"}}
    raw = {"session_id": f"../{victim}", "index": 0, "task": task}
    handle = await polar.client.start_workflow(
        "Session",
        raw,
        id=f"bad-session-{uuid.uuid4().hex[:6]}",
        task_queue=polar.settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidSessionSpec" and cause.non_retryable
    assert f"session_id: Value error, invalid session id '../{victim}'" in cause.message
    history = await handle.fetch_history()
    assert not [e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")]
    assert (data_dir / victim / "keep").is_dir()

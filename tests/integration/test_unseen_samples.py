"""Samples the harness never saw are recorded as such and never trained.

Two ways a sampled answer misses its harness: the caller hangs up while the
call is upstream, or the gateway dies after writing the record but before
answering (the SDK then sends the identical request again). Both run here on
real parts: a real gateway process killed by an S3 tap the moment SeaweedFS
has stored its record, and the real build activity (Temporal's activity
environment) over the records in S3.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from temporalio.testing import ActivityEnvironment

from activities.postrun_activities import PostrunActivities
from app.devstack import DevStack
from polar.builders.base import unseen_records
from polar.contracts import BuildRequest
from polar.records import CompletionRecord
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import BuilderSpec
from proxy.app import create_app
from tests.support import scripted_backend, serve_app, text
from tests.support.polling import wait_for
from tests.support.ports import free_port

MESSAGES = [{"role": "user", "content": "hi"}]


def _key(settings: Settings, session_id: str) -> str:
    return mint_session_key(SessionIdentity(session_id, "task-unseen"), settings.session_secret)


def _chat(url: str, key: str, timeout: float = 30) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "p", "messages": MESSAGES},
        headers={"Authorization": f"Bearer {key}"},
        timeout=timeout,
    )


async def _build(settings: Settings, storage: Storage, session_id: str) -> Any:
    request = BuildRequest(
        session_id=session_id,
        task_id="task-unseen",
        harness="command",
        builder=BuilderSpec(name="per_request"),
    )
    return await ActivityEnvironment().run(
        PostrunActivities(settings, storage).build_trajectory, request
    )


async def test_a_caller_that_hangs_up_mid_call_is_recorded_and_not_trained(
    base_settings: Settings, storage: Storage
) -> None:
    session = f"s-{uuid.uuid4().hex[:12]}"
    with scripted_backend([text("too late", delay_s=3.0), text("seen")]) as backend:
        settings = base_settings.model_copy(update={"upstream_urls": backend.url})
        with serve_app(create_app(settings, storage)) as url:
            with pytest.raises(httpx.ReadTimeout):
                _chat(url, _key(settings, session), timeout=0.5)  # hangs up mid-call
            await wait_for(
                lambda: storage.count_completions(session) == 1, 20, "the hung-up call's record"
            )
            assert _chat(url, _key(settings, session)).status_code == 200
    records = storage.list_completions(session)
    assert [r.client_disconnected for r in records] == [True, False]
    assert records[0].status_code == 499 and "disconnected" in (records[0].error or "")
    result = await _build(settings, storage, session)
    assert result.unseen_completions == {"client_disconnected": 1}
    traces = storage.load_traces(result.traces_key)
    assert [t.provenance.record_ids for t in traces] == [[records[1].record_id]]


class KillAfterRecord:
    """An S3 tap: forwards every request to the real SeaweedFS (Host header kept, so SigV4
    still verifies) and SIGKILLs the gateway the moment a completion record is stored,
    before the gateway can answer its caller."""

    def __init__(self, s3: str) -> None:
        self.s3 = s3
        self.gateway_pid: int | None = None
        self.killed = 0

    def app(self) -> FastAPI:
        app = FastAPI()
        client = httpx.AsyncClient(timeout=60)

        @app.api_route("/{path:path}", methods=["GET", "PUT", "POST", "HEAD", "DELETE"])
        async def forward(path: str, request: Request) -> Response:
            url = f"{self.s3}/{path}" + (f"?{request.url.query}" if request.url.query else "")
            answer = await client.request(
                request.method, url, content=await request.body(), headers=request.headers.raw
            )
            stored = request.method == "PUT" and "/completions/" in path and answer.is_success
            if stored and self.gateway_pid is not None and not self.killed:
                os.kill(self.gateway_pid, signal.SIGKILL)  # the record is in S3; no answer
                self.killed += 1
            headers = {k: v for k, v in answer.headers.items() if k.lower() != "content-length"}
            return Response(answer.content, answer.status_code, headers=headers)

        return app


@pytest.fixture
def tapped_gateway(
    base_settings: Settings, storage: Storage, tmp_path: Path
) -> Iterator[tuple[KillAfterRecord, DevStack, Settings]]:
    """A gateway process whose S3 goes through the killing tap, in front of a backend."""
    assert base_settings.s3_endpoint
    tap = KillAfterRecord(base_settings.s3_endpoint)
    with (
        scripted_backend([text("lost answer"), text("the answer")]) as backend,
        serve_app(tap.app()) as s3_url,
    ):
        settings = base_settings.model_copy(
            update={
                "upstream_urls": backend.url,
                "s3_endpoint": s3_url,
                # its own run dir: the suite's gateway keeps its pid file (and its life)
                "data_dir": tmp_path,
                "gateway_port": free_port(),
                "admin_port": free_port(),
                "log_format": "text",
            }
        )
        stack = DevStack(settings, with_model=False, workers=0, die_with_parent=True)
        stack.start(stack.gateway(), log=lambda _: None)
        tap.gateway_pid = stack.pid("gateway")
        try:
            yield tap, stack, settings
        finally:
            stack.stop("gateway", quiet=True)


async def test_a_record_whose_gateway_died_before_answering_is_not_trained(
    tapped_gateway: tuple[KillAfterRecord, DevStack, Settings],
    base_settings: Settings,
    storage: Storage,
) -> None:
    tap, _, settings = tapped_gateway
    session = f"s-{uuid.uuid4().hex[:12]}"
    key = _key(settings, session)
    with pytest.raises(httpx.TransportError):  # the gateway died with the record written
        await asyncio.to_thread(_chat, settings.gateway_base_url, key)
    assert tap.killed == 1
    # the SDK's retry: the identical request, to a gateway that is up (S3 direct)
    with scripted_backend([text("the answer")]) as backend:
        live = base_settings.model_copy(update={"upstream_urls": backend.url})
        with serve_app(create_app(live, storage)) as url:
            answer = await asyncio.to_thread(_chat, url, key)
    assert answer.status_code == 200
    orphan, retried = storage.list_completions(session)
    assert orphan.request == retried.request and orphan.response is not None
    assert unseen_records([orphan, retried]) == {orphan.record_id: "resent"}
    result = await _build(base_settings, storage, session)
    assert result.num_completions == 2 and result.num_traces == 1
    assert result.unseen_completions == {"resent": 1}
    (trace,) = storage.load_traces(result.traces_key)
    assert trace.provenance.record_ids == [retried.record_id]


def _record(n: int, started: float, finished: float, body: dict[str, Any], **kw: Any) -> Any:
    return CompletionRecord(
        session_id="s",
        task_id="t",
        seq=int(started * 1e9),
        record_id=f"r{n}",
        request=body,
        normalized_request=body,
        started_at=started,
        finished_at=finished,
        **kw,
    )


def test_only_an_identical_request_right_after_marks_a_record_resent() -> None:
    ask = {"messages": [{"role": "user", "content": "a"}]}
    other = {"messages": [{"role": "user", "content": "b"}]}
    # parallel identical calls (started before the first finished) are both seen
    assert unseen_records([_record(1, 0, 5, ask), _record(2, 1, 6, ask)]) == {}
    # another call in between: the repeat is a new question, not a retry
    assert (
        unseen_records([_record(1, 0, 1, ask), _record(2, 2, 3, other), _record(3, 4, 5, ask)])
        == {}
    )
    # a run of retries keeps only the last; another attempt's calls do not count
    records = [
        _record(1, 0, 1, ask),
        _record(2, 2, 3, ask),
        _record(3, 4, 5, ask),
        _record(4, 2.5, 9, other, attempt=2),
    ]
    assert unseen_records(records) == {"r1": "resent", "r2": "resent"}
    # the same body rendered to other prompt ids is another question (e.g. the server's
    # template or tools changed), not a resend
    assert (
        unseen_records(
            [
                _record(1, 0, 1, ask, prompt_token_ids=[1, 2]),
                _record(2, 2, 3, ask, prompt_token_ids=[1, 3]),
            ]
        )
        == {}
    )
    # a failed call's repeat is an ordinary retry: the failure is unusable anyway
    assert unseen_records([_record(1, 0, 1, ask, error="503"), _record(2, 2, 3, ask)]) == {}

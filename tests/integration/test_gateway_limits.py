"""What a session may make the gateway sample and store (issue 21), against the real gateway.

Real parts: the gateway app on loopback over the scripted vLLM-shaped backend, recording to
the suite's SeaweedFS, and the real build activity over those records.
- sampling controls that make a sample off-policy are refused 400 in the caller's shape
  (POLAR_OFF_POLICY=refuse), or answered, recorded `untrainable` and left out of training
  exactly as a call whose caller hung up (`record_untrainable`);
- a record past POLAR_MAX_RECORD_BYTES is refused 413, and a session past
  POLAR_MAX_SESSION_BYTES 403, each in the caller's shape, with nothing recorded lost.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import httpx
from temporalio.testing import ActivityEnvironment

from activities.postrun_activities import PostrunActivities
from polar.builders.base import unseen_records
from polar.contracts import BuildRequest
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import BuilderSpec
from proxy.app import create_app
from tests.support import scripted_backend, serve_app, text

MESSAGES = [{"role": "user", "content": "hi"}]
CONTROLS: dict[str, dict[str, Any]] = {
    "logit_bias": {"logit_bias": {"104": 100}},
    "allowed_token_ids": {"allowed_token_ids": [104]},
    "bad_words": {"bad_words": ["no"]},
    "min_tokens": {"min_tokens": 20},
    "ignore_eos": {"ignore_eos": True},
    "response_format": {"response_format": {"type": "json_object"}},
    "structured_outputs": {"structured_outputs": {"regex": "a+"}},
    "guided_json": {"guided_json": {"type": "object"}},
    "tool_choice": {
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": "required",
    },
    "chat_template": {"chat_template": "{{ 'forced' }}"},
    "chat_template_kwargs": {"chat_template_kwargs": {"add_vision_id": True}},
    "vllm_xargs": {"vllm_xargs": {"processor": "x"}},
    "use_beam_search": {"use_beam_search": True},
    "thinking_token_budget": {"thinking_token_budget": 8},
}
ON_POLICY = {
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 20,
    "stop": ["\n\n"],
    "response_format": {"type": "text"},
    "chat_template_kwargs": {"enable_thinking": False},
    "tool_choice": "auto",
}


def _session(settings: Settings) -> tuple[str, str]:
    session = f"s-{uuid.uuid4().hex[:12]}"
    identity = SessionIdentity(session, "task-limits")
    return session, mint_session_key(identity, settings.session_secret)


def _chat(url: str, key: str, **extra: Any) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "p", "messages": MESSAGES} | extra,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


def _messages(url: str, key: str, **extra: Any) -> httpx.Response:
    body = {"model": "p", "max_tokens": 50, "messages": MESSAGES} | extra
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    return httpx.post(f"{url}/v1/messages", json=body, headers=headers, timeout=60)


def _openai_error(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]  # type: ignore[no-any-return]


def _anthropic_error(answer: httpx.Response, status: int, kind: str) -> str:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    return body["error"]["message"]  # type: ignore[no-any-return]


async def _build(settings: Settings, storage: Storage, session_id: str) -> Any:
    request = BuildRequest(
        session_id=session_id,
        task_id="task-limits",
        harness="command",
        builder=BuilderSpec(name="per_request"),
    )
    return await ActivityEnvironment().run(
        PostrunActivities(settings, storage).build_trajectory, request
    )


def test_off_policy_controls_are_refused_in_the_callers_shape(
    base_settings: Settings, storage: Storage
) -> None:
    with scripted_backend([text("ok")] * 4) as backend:
        settings = base_settings.model_copy(update={"upstream_urls": backend.url})
        assert settings.off_policy == "refuse"  # the default
        with serve_app(create_app(settings, storage)) as url:
            session, key = _session(settings)
            for name, extra in CONTROLS.items():
                error = _openai_error(_chat(url, key, **extra), 400, "off_policy_sampling")
                assert error["param"] == name and "POLAR_OFF_POLICY" in error["message"], error
            # Anthropic's forced tool choice is vLLM's guided decoding too
            tool = {"name": "Bash", "input_schema": {"type": "object"}}
            forced = {"tools": [tool], "tool_choice": {"type": "tool", "name": "Bash"}}
            message = _anthropic_error(_messages(url, key, **forced), 400, "invalid_request_error")
            assert "tool_choice" in message
            # the policy's own sampling parameters pass
            assert _chat(url, key, **ON_POLICY).status_code == 200
            assert _messages(url, key, tools=[tool]).status_code == 200
        assert len(backend.requests) == 2  # nothing refused was sampled
        assert storage.count_completions(session) == 2


async def test_untrainable_records_are_answered_recorded_and_never_trained(
    base_settings: Settings, storage: Storage
) -> None:
    with scripted_backend([text("forced"), text("free"), text("forced again")]) as backend:
        settings = base_settings.model_copy(
            update={"upstream_urls": backend.url, "off_policy": "record_untrainable"}
        )
        with serve_app(create_app(settings, storage)) as url:
            session, key = _session(settings)
            assert _chat(url, key, logit_bias={"104": 100}).status_code == 200
            assert _chat(url, key).status_code == 200
            assert _chat(url, key, min_tokens=5, bad_words=["x"]).status_code == 200
    assert "logit_bias" in backend.requests[0]  # answered as asked
    records = storage.list_completions(session)
    assert [r.untrainable for r in records] == [
        "off-policy sampling controls: logit_bias",
        None,
        "off-policy sampling controls: bad_words, min_tokens",
    ]
    assert set(unseen_records(records).values()) == {"untrainable"}
    result = await _build(settings, storage, session)
    assert result.unseen_completions == {"untrainable": 2}
    traces = storage.load_traces(result.traces_key)
    assert [t.provenance.record_ids for t in traces] == [[records[1].record_id]]


def test_a_record_past_its_limit_is_refused_and_nothing_recorded_is_lost(
    base_settings: Settings, storage: Storage
) -> None:
    with scripted_backend([text("ok")] * 6) as backend:
        settings = base_settings.model_copy(
            update={"upstream_urls": backend.url, "max_record_bytes": 64 * 1024}
        )
        with serve_app(create_app(settings, storage)) as url:
            session, key = _session(settings)
            assert _chat(url, key).status_code == 200
            big = [{"role": "user", "content": os.urandom(128 * 1024).hex()}]  # 256 KiB, random
            error = _openai_error(_chat(url, key, messages=big), 413, "record_too_large")
            assert "POLAR_MAX_RECORD_BYTES" in error["message"]
            message = _anthropic_error(_messages(url, key, messages=big), 413, "request_too_large")
            assert "POLAR_MAX_RECORD_BYTES" in message
            assert _chat(url, key).status_code == 200
    records = storage.list_completions(session)
    assert len(records) == 2 and all(r.status_code == 200 for r in records)


def test_a_session_past_its_quota_is_refused_and_keeps_its_records(
    base_settings: Settings, storage: Storage
) -> None:
    with scripted_backend([text("ok")] * 30) as backend:
        settings = base_settings.model_copy(
            update={"upstream_urls": backend.url, "max_session_bytes": 4000}
        )
        with serve_app(create_app(settings, storage)) as url:
            session, key = _session(settings)
            statuses = [_chat(url, key).status_code for _ in range(10)]
            assert 200 in statuses and statuses[-1] == 403, statuses
            first_refused = statuses.index(403)
            assert set(statuses[first_refused:]) == {403}, statuses  # and stays refused
            _openai_error(_chat(url, key), 403, "session_quota_exceeded")
            _anthropic_error(_messages(url, key), 403, "permission_error")
            # another session has its own quota
            other, other_key = _session(settings)
            assert _chat(url, other_key).status_code == 200
            sampled = len(backend.requests)
    assert storage.count_completions(session) == first_refused
    assert storage.completion_bytes(session) <= 4000
    assert storage.count_completions(other) == 1
    # at its quota a session's calls are refused before anything is sampled
    assert sampled == first_refused + 1, (sampled, first_refused)

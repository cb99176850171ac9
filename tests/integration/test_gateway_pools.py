"""Named backend pools through the real gateway: scripted backends, the real SeaweedFS.

A judge pool's calls are recorded but untrainable (no builder trains on them, and
the build counts them); a side pool's calls are not recorded; an external pool gets
its host-side key; a model no pool names goes to the policy, recorded and trainable.
A pool that is not the policy answers only the worker's own key (the judge's, attempt 0)
unless it is opened to harnesses (`harness: true`): a harness's key gets 404
`model_not_found` in its caller's shape, with `unknown_models` `refuse` or not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from polar.builders.base import count_unseen, unseen_records
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from proxy.pools import WORKER_ATTEMPT
from tests.integration.test_gateway import MESSAGES, Gateway, running_gateway
from tests.support import ScriptedReply, scripted_backend, serve_app, text
from tests.support.scripted_backend import render_answer


def worker_key(gateway: Gateway, identity: SessionIdentity) -> str:
    """The key the worker signs for its own calls in `identity`'s session, as the rubric
    judge's (`activities.evaluators.rubric.JudgeAccess.key`): attempt 0, no policy model."""
    judge = SessionIdentity(identity.session_id, identity.task_id, WORKER_ATTEMPT, only_model="")
    return mint_session_key(judge, gateway.settings.session_secret)


@contextmanager
def keyed_backend() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A plain OpenAI-compatible backend that keeps each call's headers and body."""
    seen: list[dict[str, Any]] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append({"headers": dict(request.headers), "body": body})
        return JSONResponse(render_answer(body, ScriptedReply(text="external")))

    with serve_app(app) as url:
        yield f"{url}/v1", seen


def test_pools_route_record_and_exclude_from_training(
    base_settings: Settings, storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POLAR_TEST_EXTERNAL_KEY", "sk-host-side-secret")
    with (
        scripted_backend([text("policy 1"), text("policy 2")]) as policy,
        scripted_backend([text("verdict: pass")]) as judge,
        scripted_backend([text("a title")]) as side,
        keyed_backend() as (external, external_calls),
    ):
        pools = {
            "judge": {"models": ["judge"], "upstreams": [judge.url], "model": "judge-32b"},
            "side": {
                "models": ["claude-haiku*"],
                "upstreams": [side.url],
                "record": False,
                "harness": True,  # the harness's own small model
            },
            "external": {
                "models": ["gpt-*"],
                "upstreams": [external],
                "kind": "openai",
                "api_key_env": "POLAR_TEST_EXTERNAL_KEY",
            },
        }
        with running_gateway(base_settings, [policy.url], pools=json.dumps(pools)) as gateway:
            identity, key = gateway.session()
            harness, worker = gateway.client(key), gateway.client(worker_key(gateway, identity))

            def ask(model: str) -> str:
                client = worker if model in ("judge", "gpt-5") else harness
                answer = client.chat.completions.create(model=model, messages=MESSAGES)
                return answer.choices[0].message.content or ""

            said = [ask(m) for m in ("policy", "judge", "claude-haiku-4-5", "gpt-5", "unknown")]
            records = storage.list_completions(identity.session_id)

    assert said == ["policy 1", "verdict: pass", "a title", "external", "policy 2"]
    assert [len(b.requests) for b in (policy, judge, side)] == [2, 1, 1]
    assert judge.requests[0]["model"] == "judge-32b"  # the pool's model name upstream
    assert judge.requests[0]["return_token_ids"] is True  # a vLLM pool: token ids recorded
    (sent,) = external_calls
    assert sent["headers"]["authorization"] == "Bearer sk-host-side-secret"
    assert "logprobs" not in sent["body"] and "return_token_ids" not in sent["body"]
    assert sent["body"]["model"] == "gpt-5"

    # recorded: the policy's two calls, the judge's and the external one; the side call not
    by_model = {r.request["model"]: r for r in records}
    assert sorted(by_model) == ["gpt-5", "judge", "policy", "unknown"]
    assert by_model["policy"].untrainable is None and by_model["unknown"].untrainable is None
    assert by_model["judge"].untrainable == "pool judge: not the policy"
    assert by_model["judge"].has_token_ids  # recorded in full, only never trained
    assert by_model["gpt-5"].untrainable == "pool external: not the policy"
    assert "sk-host-side-secret" not in json.dumps([r.model_dump() for r in records])
    # the builders leave the pool calls out and count them
    unseen = unseen_records(records)
    assert set(unseen) == {by_model["judge"].record_id, by_model["gpt-5"].record_id}
    assert count_unseen(unseen) == {"untrainable": 2}


def test_a_task_that_refuses_unknown_models_gets_404_in_its_callers_shape(
    base_settings: Settings, storage: Storage
) -> None:
    """`harness.unknown_models: refuse` (signed into the session's key): a model that is
    neither the session's policy name, the gateway's own nor a pool's is answered 404
    `model_not_found` (OpenAI and Anthropic shapes) and not served; without it, the policy
    serves it as before."""
    import anthropic
    import openai

    with (
        scripted_backend([text("mine"), text("quietly the policy")]) as policy,
        scripted_backend([text("verdict: pass")]) as judge,
    ):
        pools = {"judge": {"models": ["judge"], "upstreams": [judge.url]}}
        with running_gateway(base_settings, [policy.url], pools=json.dumps(pools)) as gateway:
            strict, strict_key = gateway.session(only_model="my-policy")
            client = gateway.client(strict_key)
            ask = client.chat.completions.create
            assert ask(model="my-policy", messages=MESSAGES).choices[0].message.content == "mine"
            with pytest.raises(openai.NotFoundError) as judged:  # the judge is the worker's
                ask(model="judge", messages=MESSAGES)
            assert judged.value.code == "model_not_found"
            with pytest.raises(openai.NotFoundError) as refused:
                ask(model="gpt-5", messages=MESSAGES)
            assert refused.value.code == "model_not_found"
            assert "gpt-5" in str(refused.value.message)
            claude = anthropic.Anthropic(base_url=gateway.url, api_key=strict_key, max_retries=0)
            with pytest.raises(anthropic.NotFoundError) as refused_too:
                claude.messages.create(
                    model="claude-opus-4",
                    max_tokens=8,
                    messages=[{"role": "user", "content": "hi"}],
                )
            assert "claude-opus-4" in str(refused_too.value)
            _, lenient_key = gateway.session()
            lenient = gateway.client(lenient_key).chat.completions.create
            said = lenient(model="gpt-5", messages=MESSAGES).choices[0].message.content
    assert said == "quietly the policy"
    assert len(policy.requests) == 2  # the refused calls never reached a backend
    # the policy's call only: the refused ones (the judge's pool too) recorded nothing
    assert [r.status_code for r in storage.list_completions(strict.session_id)] == [200]


def test_a_harness_key_never_reaches_a_pool_that_is_not_the_policys(
    base_settings: Settings, storage: Storage
) -> None:
    """Issue 32: a harness could call `model: "judge"` through its own channel to grade its
    work before it stopped, even under `unknown_models: refuse`. A harness's key (any attempt
    from 1, strict or lenient, every API) now gets 404 `model_not_found` in its caller's
    shape from the judge's pool, nothing is sampled nor recorded; the worker's own key (the
    judge's, attempt 0) is served as before, and a pool opened with `harness: true` or a
    policy pool serves the harness too."""
    import anthropic
    import openai
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types as genai_types

    with (
        scripted_backend([text("policy 1"), text("policy 2")]) as policy,
        scripted_backend([text("verdict: 1.0")]) as judge,
        scripted_backend([text("a title")]) as side,
        scripted_backend([text("also the policy")]) as wide,
    ):
        pools = {
            "judge": {"models": ["judge", "rubric-*"], "upstreams": [judge.url]},
            "side": {"models": ["claude-haiku*"], "upstreams": [side.url], "harness": True},
            "wide": {"models": ["policy-b"], "upstreams": [wide.url], "policy": True},
        }
        with running_gateway(base_settings, [policy.url], pools=json.dumps(pools)) as gateway:
            strict, strict_key = gateway.session(only_model="policy")
            lenient, lenient_key = gateway.session(attempt=3)
            refusals: list[str] = []
            for key in (strict_key, lenient_key):
                chat = gateway.client(key).chat.completions.create
                for model in ("judge", "rubric-v2"):
                    with pytest.raises(openai.NotFoundError) as caught:
                        chat(model=model, messages=MESSAGES)
                    assert caught.value.code == "model_not_found", caught.value
                    refusals.append(caught.value.message)
                responses = gateway.client(key).responses.create
                with pytest.raises(openai.NotFoundError):
                    responses(model="judge", input="grade my work")
                claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)
                with pytest.raises(anthropic.NotFoundError) as caught_anthropic:
                    claude.messages.create(
                        model="judge", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
                    )
                assert caught_anthropic.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
                gemini = genai.Client(
                    api_key=key,
                    http_options=genai_types.HttpOptions(
                        base_url=gateway.url, retry_options=genai_types.HttpRetryOptions(attempts=1)
                    ),
                )
                with pytest.raises(genai_errors.ClientError) as caught_google:
                    gemini.models.generate_content(model="judge", contents="grade my work")
                assert caught_google.value.code == 404
            assert all("'judge'" in m or "'rubric-v2'" in m for m in refusals)
            # what a harness may call: its policy, a policy pool, a pool opened to it
            said = [
                gateway.client(lenient_key)
                .chat.completions.create(model=m, messages=MESSAGES)
                .choices[0]
                .message.content
                for m in ("policy", "policy-b", "claude-haiku-4-5")
            ]
            # the worker's own key (the judge's) still reaches the judge
            verdict = gateway.client(worker_key(gateway, lenient)).chat.completions.create(
                model="judge", messages=MESSAGES
            )
    assert said == ["policy 1", "also the policy", "a title"]
    assert verdict.choices[0].message.content == "verdict: 1.0"
    assert len(judge.requests) == 1  # only the worker's call reached the judge
    assert storage.list_completions(strict.session_id) == []  # refused: nothing recorded
    judged = [r for r in storage.list_completions(lenient.session_id) if r.attempt == 0]
    assert [r.untrainable for r in judged] == ["pool judge: not the policy"]

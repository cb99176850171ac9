"""Named backend pools (`proxy.pools`): parsing POLAR_POOLS and choosing a model's pool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from activities.evaluators.rubric import JUDGE_ATTEMPT
from proxy.pools import WORKER_ATTEMPT, PoolError, parse_pools, pool_for
from proxy.training_fields import normalize

POOLS = {
    "judge": {"models": ["judge", "rubric-*"], "upstreams": ["http://judge:8000/v1/"]},
    "side": {
        "models": ["claude-haiku*", "claude-haiku-4-5-mini"],
        "upstreams": "http://small:8000/v1",
        "kind": "openai",
        "model": "small",
        "record": False,
    },
    "wide": {"models": ["claude-*"], "upstreams": ["http://wide/v1"], "policy": True},
}


def test_pools_parse_with_their_defaults(tmp_path: Path) -> None:
    judge, side, wide = parse_pools(json.dumps(POOLS))
    assert (judge.name, judge.upstreams, judge.kind, judge.model) == (
        "judge",
        ("http://judge:8000/v1",),
        "vllm",
        None,
    )
    assert judge.record and not judge.policy
    assert judge.untrainable == "pool judge: not the policy"
    assert not side.record and side.kind == "openai" and side.model == "small"
    assert wide.policy and wide.untrainable is None
    path = tmp_path / "pools.json"
    path.write_text(json.dumps(POOLS))
    assert parse_pools(str(path)) == [judge, side, wide]
    assert parse_pools(None) == [] and parse_pools("  ") == []


def test_a_model_goes_to_its_closest_pool_and_unknown_ones_to_the_policy() -> None:
    pools = parse_pools(json.dumps(POOLS))

    def name(model: object) -> str | None:
        pool = pool_for(pools, model)
        return pool.name if pool else None

    assert name("judge") == "judge" and name("rubric-v2") == "judge"
    assert name("judge-2") is None  # an exact name is not a prefix
    assert name("claude-haiku-4-5") == "side"  # the longer prefix wins over claude-*
    assert name("claude-sonnet-4-6") == "wide"
    assert name("claude-haiku-4-5-mini") == "side"
    assert name("gpt-5") is None and name(None) is None and name("policy") is None


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[1]", "must be a JSON object"),
        ("{not json", "POLAR_POOLS is not valid JSON"),
        ("/no/such/pools.json", "not a JSON object, nor a file"),
        ('{"x": {"models": [], "upstreams": ["u"]}}', "pool x: 'models' must be a non-empty"),
        ('{"x": {"models": ["m"]}}', "pool x: 'upstreams'"),
        ('{"x": {"models": ["m"], "upstreams": ["u"], "kind": "tgi"}}', "kind 'tgi'"),
        ('{"x": {"models": ["m"], "upstreams": ["u"], "record": "no"}}', "'record' must be"),
        ('{"x": {"models": ["m"], "upstreams": ["u"], "harness": 1}}', "'harness' must be"),
        ('{"x": {"models": ["m"], "upstreams": ["u"], "key": "sk"}}', "unknown fields ['key']"),
        ('{"policy": {"models": ["m"], "upstreams": ["u"]}}', "the gateway's own pool"),
        ('{"x": "y"}', "pool x: must be an object"),
    ],
)
def test_bad_pools_get_a_clear_error(text: str, error: str) -> None:
    with pytest.raises(PoolError, match=error.replace("[", r"\[").replace("(", r"\(")):
        parse_pools(text)


def test_the_api_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    (pool,) = parse_pools(
        '{"ext": {"models": ["gpt-*"], "upstreams": ["https://api.example/v1"],'
        ' "kind": "openai", "api_key_env": "EXT_KEY"}}'
    )
    monkeypatch.delenv("EXT_KEY", raising=False)
    with pytest.raises(PoolError, match=r"\$EXT_KEY"):
        pool.api_key()
    monkeypatch.setenv("EXT_KEY", "sk-host-side")
    assert pool.api_key() == "sk-host-side"


def test_a_plain_openai_pool_gets_no_training_fields() -> None:
    request = {"model": "gpt-5", "messages": [], "stream": True, "logprobs": False}
    out = normalize(request, "openai", None)
    assert out == {"model": "gpt-5", "messages": [], "logprobs": False}
    assert normalize(request, "openai", "small")["model"] == "small"


def test_only_the_workers_own_key_reaches_a_pool_that_is_not_the_policys() -> None:
    """A non-policy pool (the judge) serves the worker's key (attempt 0, the judge's) and no
    harness's (attempts from 1), unless opened with `harness: true`; a policy pool serves all."""
    extra = {"opened": {"models": ["small"], "upstreams": ["http://s/v1"], "harness": True}}
    closed = {
        "shut": {"models": ["p2"], "upstreams": ["http://p/v1"], "policy": True, "harness": False}
    }
    judge, side, wide, opened, shut = parse_pools(json.dumps(POOLS | extra | closed))
    assert WORKER_ATTEMPT == JUDGE_ATTEMPT == 0  # the judge's key is the worker's own
    for pool in (judge, side):
        assert not pool.harness_may_call and pool.may_serve(WORKER_ATTEMPT)
        assert not any(pool.may_serve(attempt) for attempt in (1, 2, 7))
    assert wide.harness_may_call and wide.may_serve(1) and wide.may_serve(0)
    assert opened.may_serve(1) and not opened.policy
    assert not shut.may_serve(1) and shut.may_serve(0)

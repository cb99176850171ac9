"""The `harbor` evaluator reads reward.txt and reward.json as Harbor does; a bad one is an
evaluator error, never a 0 (activities/evaluators/harbor.py)."""

from __future__ import annotations

import pytest

from activities.evaluators.base import EvaluatorError
from activities.evaluators.harbor import parse_reward


@pytest.mark.parametrize(
    ("name", "raw", "reward", "components"),
    [
        ("reward.txt", b"1\n", 1.0, {}),
        ("reward.txt", b" 0.25 ", 0.25, {}),
        ("reward.json", b'{"reward": 0.5, "tests": 3}', 0.5, {"reward": 0.5, "tests": 3.0}),
    ],
)
def test_reward_files_parse_as_harbor_reads_them(
    name: str, raw: bytes, reward: float, components: dict[str, float]
) -> None:
    assert parse_reward(name, raw) == (reward, components)


@pytest.mark.parametrize(
    ("name", "raw", "why"),
    [
        ("reward.txt", b"", "is empty"),
        ("reward.txt", b"yes", "not a number"),
        ("reward.txt", b"nan", "not finite"),
        ("reward.json", b"[1]", "not an object"),
        ("reward.json", b'{"reward": "1"}', "'reward' is not a number"),
        ("reward.json", b'{"reward": true}', "'reward' is not a number"),
        ("reward.json", b'{"score": 1}', "has no 'reward'"),
        ("reward.json", b"{", "not JSON"),
    ],
)
def test_a_bad_reward_file_is_an_evaluator_error_never_0(name: str, raw: bytes, why: str) -> None:
    with pytest.raises(EvaluatorError, match=why):
        parse_reward(name, raw)

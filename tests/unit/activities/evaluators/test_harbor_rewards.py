"""The `harbor` evaluator reads reward.txt and reward.json as Harbor does; a bad one is an
evaluator error, never a 0; two writers or a link are tampering
(activities/evaluators/harbor.py)."""

from __future__ import annotations

import pytest

from activities.evaluators.base import EvaluatorError
from activities.evaluators.harbor import Tampering, judge_reward_files, parse_reward, primary_reward


@pytest.mark.parametrize(
    ("name", "raw", "reward", "components"),
    [
        ("reward.txt", b"1\n", 1.0, {}),
        ("reward.txt", b" 0.25 ", 0.25, {}),
        ("reward.json", b'{"reward": 0.5, "tests": 3}', 0.5, {"reward": 0.5, "tests": 3.0}),
        # named rewards without `reward`, as Harbor's multi-reward recipe writes them: the
        # only one is the primary reward; several, their mean; every one kept
        ("reward.json", b'{"score": 1}', 1.0, {"score": 1.0}),
        (
            "reward.json",
            b'{"correctness": 1, "style": 0.5}',
            0.75,
            {"correctness": 1.0, "style": 0.5},
        ),
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
        ("reward.json", b"{}", "holds no reward"),
        ("reward.json", b"{", "not JSON"),
    ],
)
def test_a_bad_reward_file_is_an_evaluator_error_never_0(name: str, raw: bytes, why: str) -> None:
    with pytest.raises(EvaluatorError, match=why):
        parse_reward(name, raw)


# ------------------------------------------------------------------ who wrote the reward

JSON_1 = b'{"reward": 1.0, "passed": 4}'


def test_harbors_order_reward_json_first_and_agreeing_files_count() -> None:
    """As harbor 0.25's Verifier.verify: reward.json if it exists, else reward.txt; both
    holding the same reward is one writer's (a verifier may write both)."""
    assert judge_reward_files({"reward.txt": b"0.5\n"}) == ("reward.txt", 0.5, {})
    assert judge_reward_files({"reward.json": JSON_1}) == (
        "reward.json",
        1.0,
        {"reward": 1.0, "passed": 4.0},
    )
    both = {"reward.txt": b"1\n", "reward.json": JSON_1}
    assert judge_reward_files(both)[:2] == ("reward.json", 1.0)
    third = {"reward.txt": b"0.3333333\n", "reward.json": b'{"reward": 0.33333333}'}
    assert judge_reward_files(third)[:2] == ("reward.json", 0.33333333)


@pytest.mark.parametrize(
    ("found", "odd", "why"),
    [
        # the code under test wrote reward.json 1 while the verifier wrote reward.txt 0
        (
            {"reward.txt": b"0\n", "reward.json": b'{"reward": 1}'},
            {},
            "says 1 and reward.txt says 0",
        ),
        ({"reward.txt": b"1\n", "reward.json": b'{"reward": 0, "passed": 0}'}, {}, "says 0"),
        ({"reward.txt": b"1\n", "reward.json": b"{"}, {}, "one is not valid"),
        ({"reward.txt": b"yes", "reward.json": JSON_1}, {}, "one is not valid"),
        ({}, {"reward.txt": "a link, not a file"}, "reward.txt is a link"),
        ({"reward.json": JSON_1}, {"reward.txt": "not a regular file"}, "not a regular file"),
    ],
)
def test_two_writers_or_an_odd_file_are_tampering(
    found: dict[str, bytes], odd: dict[str, str], why: str
) -> None:
    with pytest.raises(Tampering, match=why):
        judge_reward_files(found, odd)


def test_no_reward_file_is_an_evaluator_error() -> None:
    with pytest.raises(EvaluatorError, match="wrote no reward"):
        judge_reward_files({})
    with pytest.raises(EvaluatorError, match="not a number"):
        judge_reward_files({"reward.txt": b"maybe"})


def test_a_task_names_which_reward_counts() -> None:
    """`evaluator.harbor.reward_key` picks one named reward; one that test.sh did not write
    is the task's error, never a 0."""
    both = {"correctness": 1.0, "style": 0.0, "reward": 0.4}
    assert primary_reward(both) == 0.4
    assert primary_reward(both, "style") == 0.0
    with pytest.raises(EvaluatorError, match="has no 'speed'"):
        primary_reward(both, "speed")
    assert judge_reward_files({"reward.json": b'{"a": 0, "b": 1}'}, reward_key="b")[1] == 1.0

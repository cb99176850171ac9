"""Shared placements (`proxy.routing_store`): where they are kept, when one is read."""

from __future__ import annotations

import pytest

from proxy.routing import route_key
from proxy.routing_store import has_answer, route_object_key


def test_a_placement_lives_under_its_session() -> None:
    key = route_key("s-1", [{"role": "system", "content": "You are a coding agent."}])
    chain = key.split("/")[1]
    assert route_object_key(key) == f"sessions/s-1/routes/policy/{chain}.json"
    assert route_object_key("s-1", "judge") == "sessions/s-1/routes/judge/session.json"
    with pytest.raises(ValueError):
        route_object_key("../other/x")


def test_only_a_prompt_with_an_answer_in_it_is_looked_up() -> None:
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert not has_answer(first)
    assert has_answer(first + [{"role": "assistant", "content": "a"}])
    assert not has_answer(None)

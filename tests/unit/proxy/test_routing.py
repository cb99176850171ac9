"""Session-affine routing (`proxy.routing`): the pure ring and router, no network."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

from proxy.routing import HashRing, Router, route_key
from proxy.upstream_replicas import read_urls_file, server_root

URLS = [f"http://replica-{i}:8000/v1" for i in range(8)]
KEYS = [f"s-{i:05d}" for i in range(4000)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def placements(router: Router, keys: list[str] = KEYS) -> dict[str, str]:
    """Where each key goes on an idle router (nothing held in flight)."""
    return {k: next(router.order(k)) for k in keys}


def test_a_key_stays_on_one_replica_and_keys_spread_evenly() -> None:
    router = Router(URLS)
    first = placements(router)
    for _ in range(3):
        assert placements(router) == first
    shares = Counter(first.values())
    assert set(shares) == set(URLS)
    mean = len(KEYS) / len(URLS)
    assert max(shares.values()) < 1.3 * mean and min(shares.values()) > 0.7 * mean, shares


def test_walk_names_every_replica_once_starting_at_home() -> None:
    ring = HashRing(URLS)
    for key in KEYS[:50]:
        walk = list(ring.walk(key))
        assert sorted(walk) == sorted(URLS)
        assert walk[0] == ring.home(key)


def test_a_dead_replica_moves_only_its_own_keys() -> None:
    clock = Clock()
    router = Router(URLS, clock=clock)
    before = placements(router)
    dead = URLS[3]
    router.failed(dead, unreachable=True)
    after = placements(router)
    moved = {k for k in KEYS if before[k] != after[k]}
    assert moved == {k for k in KEYS if before[k] == dead}
    assert dead not in after.values()
    # its keys spread over the others, not onto one neighbour
    assert len({after[k] for k in moved}) >= 5
    clock.now += router.down_s + 1  # down for a while, then tried again
    assert placements(router) == before


def test_removing_a_replica_moves_only_its_keys_and_adding_one_a_bounded_share() -> None:
    router = Router(URLS)
    before = placements(router)
    router.set_replicas(URLS[:3] + URLS[4:])
    after = placements(router)
    assert {k for k in KEYS if before[k] != after[k]} == {k for k in KEYS if before[k] == URLS[3]}

    router = Router(URLS)
    new = "http://replica-new:8000/v1"
    router.set_replicas(URLS + [new])
    grown = placements(router)
    moved = [k for k in KEYS if before[k] != grown[k]]
    assert all(grown[k] == new for k in moved)  # keys move only onto the new replica
    share = len(moved) / len(KEYS)
    assert 0.5 / 9 < share < 1.6 / 9, share  # about 1/N of the keys, not a reshuffle


def test_a_replica_at_its_limit_spills_to_the_next_on_the_keys_walk() -> None:
    router = Router(URLS, max_inflight=2, load_factor=100)  # the limit binds, not the mean
    key = "s-hot"
    walk = list(router.ring.walk(key))
    home = walk[0]
    for _ in range(2):
        assert next(router.order(key)) == home
        router.acquire(home)
    assert next(router.order(key)) == walk[1]  # the same spill replica each time: warm too
    router.release(home)
    assert next(router.order(key)) == home


def test_when_every_replica_is_at_its_limit_the_least_loaded_gets_the_call() -> None:
    router = Router(URLS[:3], max_inflight=1)
    for url, held in zip(URLS[:3], (3, 1, 2), strict=True):
        for _ in range(held):
            router.acquire(url)
    assert next(router.order("s-any")) == URLS[1]


@pytest.mark.parametrize("replicas", [8, 32])
def test_max_load_stays_within_the_factor_of_the_mean(replicas: int) -> None:
    """Every call of 30 hot sessions (keys whose home is one replica) plus 500 others held
    in flight at once: no replica ever carries more than ceil(1.25 x mean)."""
    urls = [f"http://r{i}:8000/v1" for i in range(replicas)]
    router = Router(urls, load_factor=1.25)
    hot_home = urls[0]
    hot = [k for k in KEYS if router.ring.home(k) == hot_home][:30]
    total = 0
    for key in hot + KEYS[:500]:
        url = next(router.order(key))
        router.acquire(url)
        total += 1
        loads = [r.inflight for r in router.replicas.values()]
        assert max(loads) <= math.ceil(1.25 * total / replicas), (total, max(loads))
    assert router.replicas[hot_home].inflight <= math.ceil(1.25 * total / replicas)


def test_unloaded_calls_of_a_session_never_leave_home() -> None:
    """A session's turns are sequential: each finds its home below the bound, even when
    other sessions keep every replica busy."""
    router = Router(URLS)
    background = [next(router.order(k)) for k in KEYS[:200]]
    for url in background:
        router.acquire(url)
    home = router.ring.home("s-mine")
    for _ in range(40):
        url = next(router.order("s-mine"))
        router.acquire(url)
        router.release(url)
        assert url == home


def test_passive_and_active_health() -> None:
    clock = Clock()
    router = Router(URLS[:2], down_s=10, fail_threshold=3, clock=clock)
    a, b = URLS[:2]
    key = next(k for k in KEYS if router.ring.home(k) == a)
    for _ in range(2):
        router.failed(a)  # 5xx answers: down only after the threshold, in a row
    assert next(router.order(key)) == a
    router.succeeded(a)
    for _ in range(2):
        router.failed(a)
    assert next(router.order(key)) == a
    router.failed(a)
    assert list(router.order(key)) == [b, a]  # the down one last, still there to try
    clock.now += 11
    assert next(router.order(key)) == a
    router.set_health(a, False)  # a probe failed: down until a probe passes
    clock.now += 1000
    assert next(router.order(key)) == b
    router.set_health(a, True)
    assert next(router.order(key)) == a
    router.set_health(a, False)
    router.set_health(b, False)
    assert sorted(router.order(key)) == sorted([a, b])  # all down: try them anyway


def test_round_robin_mode_takes_turns() -> None:
    router = Router(URLS[:3], mode="round_robin")
    assert [next(router.order("s-1")) for _ in range(6)] == URLS[:3] * 2
    with pytest.raises(ValueError, match="unknown upstream routing"):
        Router(URLS, mode="random")
    with pytest.raises(ValueError, match="no upstream URLs"):
        Router([])


def test_route_key_names_the_session_and_its_chain() -> None:
    system = {"role": "system", "content": "You are a coding agent."}
    sub = {"role": "system", "content": "You are a search sub-agent."}
    turn1 = [system, {"role": "user", "content": "fix it"}]
    turn5 = turn1 + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]
    assert route_key("s-1", turn1) == route_key("s-1", turn5)
    assert route_key("s-1", turn1).startswith("s-1/")
    assert route_key("s-1", [sub, {"role": "user", "content": "find"}]) != route_key("s-1", turn1)
    assert route_key("s-2", turn1) != route_key("s-1", turn1)
    assert route_key("s-1", None) == "s-1"


def test_url_file_and_server_root(tmp_path: Path) -> None:
    path = tmp_path / "upstreams"
    path.write_text("# replicas\nhttp://a:8000/v1/\nhttp://b:8000/v1, http://c:8000/v1\n\n")
    assert read_urls_file(path) == ["http://a:8000/v1", "http://b:8000/v1", "http://c:8000/v1"]
    assert read_urls_file(tmp_path / "missing") == []
    assert server_root("http://a:8000/v1") == "http://a:8000"
    assert server_root("http://a:8000") == "http://a:8000"

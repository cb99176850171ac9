"""Session-affine routing (`proxy.routing`): the pure router and its table, no network.

The behaviour tests drive the default (affine) router only through `order`, `acquire`,
`release`, `failed` and `set_replicas`, which the previous policy (consistent hashing
with bounded loads, now `mode="hash"`) has too: each of them fails on it.
"""

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
    """Where each key's call goes now (nothing held in flight)."""
    return {k: next(router.order(k)) for k in keys}


def call(router: Router, key: str) -> str:
    """One whole call of `key` (placed, sent, answered): where it went."""
    url = next(router.order(key))
    router.acquire(url)
    router.release(url)
    return url


# ---------------------------------------------------------------------- affine (default)


@pytest.mark.parametrize("replicas", [4, 8, 32])
@pytest.mark.parametrize("per_replica", [1, 2, 3])
def test_new_sessions_are_placed_by_load_evenly(replicas: int, per_replica: int) -> None:
    """A few sessions per replica land exactly evenly (hashing piles some up: the issue's
    second cause), and each session's later calls stay where it was placed."""
    urls = [f"http://r{i}:8000/v1" for i in range(replicas)]
    router = Router(urls)
    sessions = [f"sess-{i}" for i in range(replicas * per_replica)]
    home = {s: call(router, s) for s in sessions}
    assert set(Counter(home.values()).values()) == {per_replica}
    for _ in range(3):
        assert {s: call(router, s) for s in sessions} == home


def test_a_session_stays_home_at_light_load() -> None:
    """Two calls of a session's group in flight on its home and none elsewhere: the next
    call still goes home (the old bound ceil(1.25 x mean) = 1 spilled it to a cold one)."""
    router = Router(URLS[:4])
    home = call(router, "s-busy")
    for _ in range(2):
        router.acquire(home)
    for _ in range(5):
        assert call(router, "s-busy") == home


def test_calls_in_flight_on_other_sessions_never_move_a_session() -> None:
    router = Router(URLS)
    mine = call(router, "s-mine")
    background = [next(router.order(k)) for k in KEYS[:200]]
    for url in background:
        router.acquire(url)
    for _ in range(40):
        assert call(router, "s-mine") == mine


def test_a_saturated_home_spills_to_one_replica_and_the_session_comes_back() -> None:
    """At the replica's own limit the call spills, always to the same replica while it
    can take it (warm too); once home frees up the session is served there again."""
    router = Router(URLS, max_inflight=2)
    key = "s-hot"
    home = call(router, key)
    for _ in range(2):
        router.acquire(home)
    spilled = {call(router, key) for _ in range(4)}
    assert len(spilled) == 1 and home not in spilled
    router.release(home)
    assert call(router, key) == home


def test_an_imbalance_spills_only_past_both_thresholds() -> None:
    """Without a limit, home spills a call only when it would hold more than `spill_abs`
    calls more than the least-loaded replica and more than `spill_rel` times as many."""
    router = Router(URLS[:2], spill_abs=4, spill_rel=2.0)
    key = "s-hot"
    home = call(router, key)
    other = next(u for u in URLS[:2] if u != home)
    for _ in range(3):
        router.acquire(home)
    assert call(router, key) == home  # 4 vs 0: not past the absolute threshold
    router.acquire(home)
    assert call(router, key) == other  # 5 vs 0: past both
    for _ in range(8):
        router.acquire(home)
    for _ in range(7):
        router.acquire(other)
    assert call(router, key) == home  # 13 vs 7: not past the relative threshold


def test_a_lost_replica_moves_only_its_sessions_re_placed_by_load() -> None:
    clock = Clock()
    router = Router(URLS, clock=clock)
    sessions = KEYS[:80]
    before = {s: call(router, s) for s in sessions}
    dead = URLS[3]
    router.failed(dead, unreachable=True)
    after = {s: call(router, s) for s in sessions}
    moved = {s for s in sessions if before[s] != after[s]}
    assert moved == {s for s in sessions if before[s] == dead}
    # re-placed by load: onto 7 replicas that held 10 sessions each, 10 more spread evenly
    assert max(Counter(after.values()).values()) - min(Counter(after.values()).values()) <= 1
    clock.now += router.down_s + 1  # the replica is back: nobody moves again
    assert {s: call(router, s) for s in sessions} == after


def test_a_home_lost_mid_call_is_re_placed_by_load_for_that_call() -> None:
    """The call that finds its home unreachable goes where the session will stay: the
    least-loaded replica, not the next one on a hash walk."""
    router = Router(URLS[:3])
    sessions = [f"s-{i}" for i in range(6)]
    home = {s: call(router, s) for s in sessions}
    quiet = URLS[2]
    for s in sessions:  # the third replica's sessions finish: it holds none
        if home[s] == quiet:
            router.table.assign(s, URLS[0], router.clock())
    mine = next(s for s in sessions if home[s] == URLS[1])
    tries = router.order(mine)
    assert next(tries) == URLS[1]
    router.failed(URLS[1], unreachable=True)
    assert next(tries) == quiet
    assert call(router, mine) == quiet


def test_adding_a_replica_moves_no_session_and_new_ones_fill_it() -> None:
    router = Router(URLS)
    sessions = KEYS[:80]
    before = {s: call(router, s) for s in sessions}
    new = "http://replica-new:8000/v1"
    router.set_replicas(URLS + [new])
    assert {s: call(router, s) for s in sessions} == before
    assert [call(router, f"late-{i}") for i in range(10)] == [new] * 10


def test_removing_a_replica_moves_only_its_sessions() -> None:
    router = Router(URLS)
    sessions = KEYS[:80]
    before = {s: call(router, s) for s in sessions}
    router.set_replicas(URLS[:3] + URLS[4:])
    after = {s: call(router, s) for s in sessions}
    assert {s for s in sessions if before[s] != after[s]} == {
        s for s in sessions if before[s] == URLS[3]
    }


def test_finished_sessions_stop_counting_and_memory_stays_bounded() -> None:
    clock = Clock()
    router = Router(URLS[:2], live_s=60, max_sessions=1000, clock=clock)
    for i in range(5000):  # sessions of one call each, then silence
        call(router, f"done-{i}")
        clock.now += 0.01
    assert len(router.table) == 1000
    clock.now += 61
    call(router, "fresh")
    assert sorted(r.sessions for r in router.replicas.values()) == [0, 1]


def test_a_session_that_stops_calling_soon_stops_counting() -> None:
    """A session that called every second and went silent is not held for a minute: after
    a few of its gaps its replica takes the next new session, though it served more calls
    than the replica of a session still going."""
    clock = Clock()
    router = Router(URLS[:2], live_s=60, clock=clock)
    going = call(router, "s-going")
    done = None
    for t in range(1, 13):
        clock.now += 1
        if t <= 6:
            done = call(router, "s-done")  # 6 calls, then it ends
        if t % 3 == 0:
            call(router, "s-going")  # 5 calls in all, still going
    assert done is not None and done != going
    assert call(router, "s-new") == done


def test_a_placement_made_elsewhere_is_adopted() -> None:
    """What another gateway shared wins over this gateway's own view of load."""
    router = Router(URLS)
    other = URLS[5]
    assert router.adopt("s-shared", other)
    assert call(router, "s-shared") == other
    router.failed(URLS[6], unreachable=True)
    assert not router.adopt("s-elsewhere", URLS[6])  # down here: placed by load instead


# ---------------------------------------------------------------------- hash, round robin


def test_hash_mode_keeps_a_key_on_one_replica_and_spreads_keys() -> None:
    router = Router(URLS, mode="hash")
    first = placements(router)
    assert placements(router) == first
    shares = Counter(first.values())
    mean = len(KEYS) / len(URLS)
    assert max(shares.values()) < 1.3 * mean and min(shares.values()) > 0.7 * mean, shares


def test_walk_names_every_replica_once_starting_at_home() -> None:
    ring = HashRing(URLS)
    for key in KEYS[:50]:
        walk = list(ring.walk(key))
        assert sorted(walk) == sorted(URLS)
        assert walk[0] == ring.home(key)


@pytest.mark.parametrize("replicas", [8, 32])
def test_hash_mode_bounds_load_by_the_factor_of_the_mean(replicas: int) -> None:
    urls = [f"http://r{i}:8000/v1" for i in range(replicas)]
    router = Router(urls, mode="hash", load_factor=1.25)
    hot = [k for k in KEYS if router.ring.home(k) == urls[0]][:30]
    for total, key in enumerate(hot + KEYS[:500], start=1):
        router.acquire(next(router.order(key)))
        loads = [r.inflight for r in router.replicas.values()]
        assert max(loads) <= math.ceil(1.25 * total / replicas), (total, max(loads))


def test_passive_and_active_health() -> None:
    clock = Clock()
    router = Router(URLS[:2], down_s=10, fail_threshold=3, clock=clock)
    a, b = URLS[:2]
    key = next(k for k in KEYS if call(router, k) == a)
    for _ in range(2):
        router.failed(a)  # 5xx answers: down only after the threshold, in a row
    assert next(router.order(key)) == a
    router.succeeded(a)
    for _ in range(2):
        router.failed(a)
    assert next(router.order(key)) == a
    router.failed(a)
    assert list(router.order(key)) == [b, a]  # the down one last, still there to try
    router.set_health(b, False)
    router.set_health(a, False)
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

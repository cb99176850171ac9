"""Which inference replica serves a call: session affinity with balanced load, and health.

An agent session re-sends its whole history every turn; the replica that served
the last turn holds that history in its prefix cache. `Router` has three modes:

* `affine` (the default): a routing key (a session, and within it a prefix chain:
  `route_key`) is *placed* by load on its first call (the replica holding the fewest
  live keys, then the fewest prompt tokens and calls in flight) and then *stays* there
  (`proxy.routing_table`). A call spills only when its home is saturated: at
  `max_inflight` (the replica's own concurrency limit), or past both an absolute and a
  relative imbalance of calls in flight (`spill_abs` more than the least-loaded replica
  and `spill_rel` times it, as SGLang's router does). The spill goes to the same
  replica while it can take it (warm too), and the key's home stays: its next call goes
  home as soon as home is below the limit again. A key whose home is lost (down or
  removed) is re-placed by load and stays there; nothing else moves. Several gateways
  share placements through `proxy.routing_store`.
* `hash`: consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
  2018): a key goes to the first replica clockwise from its hash on a ring of virtual
  nodes whose in-flight calls are below `ceil(load_factor * mean)` and `max_inflight`.
  Stateless, so any number of gateways agree; but a few keys hash unevenly over a few
  replicas, and at light load the bound spills warm calls to cold replicas.
* `round_robin`: the next replica in turn, down ones last.

Health is passive (`failed`: a refused connection marks a replica down at once,
answers of 5xx or timeouts after `fail_threshold` in a row) and active (`set_health`,
from the client's periodic probe); a down replica is skipped until `down_s` have
passed or a probe finds it healthy. If every replica is down, all are tried.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from polar import fastjson
from proxy.routing_table import FORGET_S, LIVE_S, MAX_ENTRIES, AssignmentTable

MODES = ("affine", "hash", "round_robin")
CHAIN_SAMPLE = 1024
RECENT_S = 6 * 3600.0
"""time constant of a replica's decayed call count (new keys go where it is lowest)"""
VNODES = 160
"""virtual nodes per replica: with 160, the largest arc share stays within ~1.3x of 1/N"""


def ring_hash(text: str) -> int:
    """A 64-bit hash stable across processes (every gateway places keys alike)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def route_key(session_id: str, messages: Any) -> str:
    """The routing key of a call: its session, and its prefix chain within the session.

    A chain is named by its first message (the system prompt, or the first user turn):
    a sub-agent, started with its own system prompt, is its own chain and may be placed
    elsewhere; later turns and a compaction that keeps the system prompt stay with it.
    """
    if not isinstance(messages, list) or not messages:
        return session_id
    first = messages[0]
    content = first.get("content") if isinstance(first, dict) else None
    text = content if isinstance(content, str) else fastjson.dumps(first).decode()
    # its length, head and tail name a first message well enough, in ~2 us at any size
    sample = f"{len(text)}:{text[:CHAIN_SAMPLE]}:{text[-CHAIN_SAMPLE:]}"
    return f"{session_id}/{ring_hash(sample) & 0xFFFFFFFF:08x}"


class HashRing:
    """Replicas placed on a 64-bit ring as `vnodes` virtual nodes each."""

    def __init__(self, nodes: list[str], vnodes: int = VNODES) -> None:
        points = sorted((ring_hash(f"{node}#{i}"), node) for node in nodes for i in range(vnodes))
        self.nodes = list(dict.fromkeys(nodes))
        self._hashes = [h for h, _ in points]
        self._owners = [n for _, n in points]

    def walk(self, key: str) -> Iterator[str]:
        """Every replica once, clockwise from `key`'s hash: the first is the key's home."""
        if not self._owners:
            return
        start = bisect.bisect(self._hashes, ring_hash(key))
        seen: set[str] = set()
        size = len(self._owners)
        for i in range(size):
            node = self._owners[(start + i) % size]
            if node not in seen:
                seen.add(node)
                yield node
                if len(seen) == len(self.nodes):
                    return

    def home(self, key: str) -> str:
        """The replica a key goes to when every replica is healthy and idle."""
        return next(self.walk(key))


@dataclass(eq=False)
class Replica:
    """One replica's state as this gateway sees it (compared by identity)."""

    url: str
    inflight: int = 0
    inflight_tokens: int = 0
    """prompt tokens of the calls in flight (estimated from the request's size)"""
    sessions: int = 0
    """live keys whose home this is (affine mode)"""
    served: int = 0
    recent: float = 0.0
    """calls sent here, decayed with a time constant of `RECENT_S`, scaled to the
    router's epoch (`Router._count_recent`)"""
    failures: int = 0
    """consecutive failed calls (5xx answers, timeouts)"""
    down_until: float = 0.0
    probe_ok: bool | None = None
    """the last active probe's verdict; None before the first"""

    def up(self, now: float) -> bool:
        return now >= self.down_until and self.probe_ok is not False


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a call goes, and why: `new` (a key placed by load), `stay` (at its home),
    `spill` (home saturated), `move` (home lost: re-placed by load), `hash`, `turn`."""

    url: str
    event: str


class Router:
    """Places calls on replicas (`place`, `order`), counts their load and health."""

    def __init__(
        self,
        urls: list[str],
        *,
        mode: str = "affine",
        load_factor: float = 1.25,
        max_inflight: int = 0,
        spill_abs: int = 16,
        spill_rel: float = 2.0,
        live_s: float = LIVE_S,
        forget_s: float = FORGET_S,
        max_sessions: int = MAX_ENTRIES,
        down_s: float = 10.0,
        fail_threshold: int = 3,
        vnodes: int = VNODES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown upstream routing {mode!r}: use one of {MODES}")
        if load_factor < 1.0:
            raise ValueError(f"upstream load factor {load_factor}: must be at least 1")
        self.mode = mode
        self.load_factor = load_factor
        self.max_inflight = max_inflight
        self.spill_abs = spill_abs
        self.spill_rel = spill_rel
        self.down_s = down_s
        self.fail_threshold = fail_threshold
        self.vnodes = vnodes
        self.clock = clock
        self.replicas: dict[str, Replica] = {}
        self.ring = HashRing([], vnodes)
        self.table = AssignmentTable(
            self._held, live_s=live_s, forget_s=forget_s, max_entries=max_sessions
        )
        self.events: dict[str, int] = dict.fromkeys(("new", "stay", "spill", "move"), 0)
        self._turn = itertools.count()
        self._epoch = clock()
        self.set_replicas(urls)

    @property
    def urls(self) -> list[str]:
        return list(self.replicas)

    def set_replicas(self, urls: list[str]) -> bool:
        """Make `urls` the replica set (kept ones keep their state and keys; the keys of
        removed ones move on their next call); True if it changed."""
        urls = list(dict.fromkeys(urls))
        if not urls:
            raise ValueError("no upstream URLs: set POLAR_UPSTREAM_URLS")
        if urls == list(self.replicas):
            return False
        self.replicas = {u: self.replicas.get(u) or Replica(u) for u in urls}
        held = self.table.held_by()
        for url, replica in self.replicas.items():
            replica.sessions = held.get(url, 0)
        self.ring = HashRing(urls, self.vnodes)
        return True

    def _held(self, url: str, delta: int) -> None:
        replica = self.replicas.get(url)
        if replica is not None:
            replica.sessions = max(0, replica.sessions + delta)

    # ------------------------------------------------------------------ placement

    def order(self, key: str | None, placement: Placement | None = None) -> Iterator[str]:
        """The replicas to try for a call, best first: its placement (`place`, unless
        given), then the others (healthy ones first) for when it cannot be reached."""
        first = (placement or self.place(key)).url
        yield first
        tried = {first}
        if self.mode == "affine" and key is not None:  # placed again: a lost home moves
            again = self.place(key).url
            if again not in tried:
                tried.add(again)
                yield again
        now = self.clock()
        if self.mode != "round_robin" and key is not None:
            others: Iterator[str] = self.ring.walk(key)
        else:
            others = iter(self.replicas)
        rest = [u for u in others if u not in tried]
        yield from sorted(rest, key=lambda u: not self.replicas[u].up(now))

    def place(self, key: str | None) -> Placement:
        """Where the call of `key` goes now (None: round-robin)."""
        now = self.clock()
        if self.mode == "affine" and key is not None:
            placement = self._place_affine(key, now)
            self.events[placement.event] += 1
            return placement
        live = self._live(now)
        if self.mode == "round_robin" or key is None:
            return Placement(live[next(self._turn) % len(live)].url, "turn")
        return Placement(self._place_hash(key, live, now), "hash")

    def _live(self, now: float) -> list[Replica]:
        """The replicas up now; all of them if every one is down (try them anyway)."""
        live = [
            r
            for r in self.replicas.values()
            if now >= r.down_until and r.probe_ok is not False  # `Replica.up`, inlined
        ]
        return live or list(self.replicas.values())

    def _place_hash(self, key: str, live: list[Replica], now: float) -> str:
        bound = math.ceil(self.load_factor * (sum(r.inflight for r in live) + 1) / len(live))
        if self.max_inflight > 0:
            bound = min(bound, self.max_inflight)
        everyone = len(live) == len(self.replicas)
        for url in self.ring.walk(key):
            replica = self.replicas[url]
            if replica.inflight < bound and (everyone or replica.up(now)):
                return url
        return min(live, key=lambda r: r.inflight).url  # all at their limit: least-loaded

    def _place_affine(self, key: str, now: float) -> Placement:
        table = self.table
        table.expire(now)
        entry = table.touch(key, now)
        if entry is None:
            entry = table.assign(key, self._least_loaded(key, self._live(now)), now)
            return Placement(entry.home, "new")
        home = self.replicas.get(entry.home)
        if home is None or not (home.up(now) or self._all_down(now)):  # lost: re-placed
            entry = table.assign(key, self._least_loaded(key, self._live(now)), now)
            return Placement(entry.home, "move")
        if home.inflight < self.spill_abs and (
            self.max_inflight <= 0 or home.inflight < self.max_inflight
        ):
            return Placement(home.url, "stay")  # the common case: O(1), no other replica read
        live = self._live(now)
        low = min(r.inflight for r in live)
        if not self._saturated(home, low):
            return Placement(home.url, "stay")
        spill = self.replicas.get(entry.spill) if entry.spill else None
        if spill is None or spill is home or spill not in live or self._saturated(spill, low):
            spill = min(live, key=lambda r: (r.inflight, r.inflight_tokens))
        if spill is home or self._saturated(spill, low):
            return Placement(home.url, "stay")  # everyone saturated: wait where it is warm
        entry.spill = spill.url
        return Placement(spill.url, "spill")

    def _all_down(self, now: float) -> bool:
        return not any(r.up(now) for r in self.replicas.values())

    def _saturated(self, replica: Replica, low: int) -> bool:
        """Whether one more call would overload `replica`: at its own concurrency limit,
        or past both the absolute and the relative imbalance over the least-loaded (`low`)."""
        load = replica.inflight + 1
        if 0 < self.max_inflight < load:
            return True
        return load - low > self.spill_abs and load > self.spill_rel * max(low, 1)

    def _least_loaded(self, key: str, live: list[Replica]) -> str:
        """The replica a new key is placed on: fewest live keys held, then fewest calls
        lately (decayed over `RECENT_S`: the work its keys did, finished ones included),
        then fewest prompt tokens in flight, among those not saturated; ties go round the
        replicas from a point set by the key's hash (the same in every gateway)."""
        n = len(live)
        start = ring_hash(key) % n
        low = -1  # the least in flight, read only if a saturation check needs it
        best: Replica | None = None
        held, recent, tokens = 0, 0.0, 0
        for i in range(n):
            replica = live[(start + i) % n]
            if best is not None and (
                replica.sessions > held
                or replica.sessions == held
                and (
                    replica.recent > recent
                    or replica.recent == recent
                    and replica.inflight_tokens >= tokens
                )
            ):
                continue
            if replica.inflight >= self.spill_abs or 0 < self.max_inflight <= replica.inflight:
                if low < 0:
                    low = min(r.inflight for r in live)
                if self._saturated(replica, low):
                    continue
            best = replica
            held, recent, tokens = replica.sessions, replica.recent, replica.inflight_tokens
        if best is None:  # all saturated: the least busy
            best = min(live, key=lambda r: (r.inflight, r.sessions))
        return best.url

    def home_of(self, key: str) -> str | None:
        """The key's home replica (affine mode), if it has one."""
        entry = self.table.get(key)
        return entry.home if entry is not None else None

    def adopt(self, key: str, url: str) -> bool:
        """Take `url` as the key's home (a placement another gateway made and shared):
        False if this gateway does not know `url` or finds it down."""
        replica = self.replicas.get(url)
        if replica is None or not replica.up(self.clock()):
            return False
        entry = self.table.get(key)
        if entry is None or entry.home != url:
            self.table.assign(key, url, self.clock())
        return True

    def acquire(self, url: str, tokens: int = 0) -> None:
        """A call (of about `tokens` prompt tokens) is being sent to `url`."""
        replica = self.replicas.get(url)
        if replica is not None:
            replica.inflight += 1
            replica.inflight_tokens += tokens
            replica.served += 1
            self._count_recent(replica)

    def _count_recent(self, replica: Replica) -> None:
        """Add a call to `replica`'s decayed count. Counts are kept scaled by
        exp((t - epoch) / RECENT_S), so comparing them needs no decay to now; the epoch
        moves before the scale grows past floats."""
        age = (self.clock() - self._epoch) / RECENT_S
        if age > 500:
            for other in self.replicas.values():
                other.recent *= math.exp(-age)
            self._epoch, age = self.clock(), 0.0
        replica.recent += math.exp(age)

    def release(self, url: str, tokens: int = 0) -> None:
        """The call sent to `url` has its answer (or failed)."""
        replica = self.replicas.get(url)
        if replica is not None and replica.inflight > 0:
            replica.inflight -= 1
            replica.inflight_tokens = max(0, replica.inflight_tokens - tokens)

    # ------------------------------------------------------------------ health

    def failed(self, url: str, *, unreachable: bool = False) -> None:
        """Passive health: a call to `url` failed (`unreachable`: down at once)."""
        replica = self.replicas.get(url)
        if replica is None:
            return
        replica.failures += 1
        if unreachable or replica.failures >= self.fail_threshold:
            replica.down_until = self.clock() + self.down_s

    def succeeded(self, url: str) -> None:
        replica = self.replicas.get(url)
        if replica is not None:
            replica.failures = 0
            replica.down_until = 0.0

    def set_health(self, url: str, ok: bool) -> None:
        """Active health: the verdict of a probe of `url`."""
        replica = self.replicas.get(url)
        if replica is None:
            return
        replica.probe_ok = ok
        if ok:
            replica.failures = 0
            replica.down_until = 0.0

    def snapshot(self) -> list[dict[str, Any]]:
        """Each replica's state, for the health endpoint."""
        now = self.clock()
        return [
            {
                "url": r.url,
                "up": r.up(now),
                "inflight": r.inflight,
                "sessions": r.sessions,
                "served": r.served,
                "failures": r.failures,
            }
            for r in self.replicas.values()
        ]

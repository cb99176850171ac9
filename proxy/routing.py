"""Which inference replica serves a call: session affinity with bounded load, and health.

An agent session re-sends its whole history every turn; the replica that served
the last turn holds that history in its prefix cache. `Router` keeps each
routing key (a session, and within it a prefix chain: `route_key`) on one
replica with consistent hashing with bounded loads (Mirrokni, Thorup and
Zadimoghaddam, 2018): the replicas sit on a hash ring as virtual nodes; a key
goes to the first replica clockwise from its hash whose in-flight calls are
below `ceil(load_factor * mean)` (the mean counting the call being placed)
and below the per-replica concurrency limit. No replica then carries more than
`load_factor` times the mean, and an overloaded key spills to the next replica
on its own walk, the same one each time, so even its spill stays warm. When
every replica is at its limit the call goes to the least-loaded one.

Removing (or losing) a replica moves only the keys it held; adding one moves
the keys whose hash now falls in its arcs, about 1/N of them. Health is passive
(`failed`: a refused connection marks a replica down at once, answers of
5xx or timeouts after `fail_threshold` in a row) and active (`set_health`, from
the client's periodic probe); a down replica is skipped until `down_s` have
passed or a probe finds it healthy. If every replica is down, all are tried.

`mode="round_robin"` keeps the old behaviour (the next replica in turn, down
ones last), for comparison and for stateless backends.
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

MODES = ("affine", "round_robin")
CHAIN_SAMPLE = 1024
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


@dataclass
class Replica:
    """One replica's state as this gateway sees it."""

    url: str
    inflight: int = 0
    served: int = 0
    failures: int = 0
    """consecutive failed calls (5xx answers, timeouts)"""
    down_until: float = 0.0
    probe_ok: bool | None = None
    """the last active probe's verdict; None before the first"""

    def up(self, now: float) -> bool:
        return now >= self.down_until and self.probe_ok is not False


class Router:
    """Places calls on replicas (`order`), counts their in-flight calls and health."""

    def __init__(
        self,
        urls: list[str],
        *,
        mode: str = "affine",
        load_factor: float = 1.25,
        max_inflight: int = 0,
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
        self.down_s = down_s
        self.fail_threshold = fail_threshold
        self.vnodes = vnodes
        self.clock = clock
        self.replicas: dict[str, Replica] = {}
        self.ring = HashRing([], vnodes)
        self._turn = itertools.count()
        self.set_replicas(urls)

    @property
    def urls(self) -> list[str]:
        return list(self.replicas)

    def set_replicas(self, urls: list[str]) -> bool:
        """Make `urls` the replica set (kept ones keep their state); True if it changed."""
        urls = list(dict.fromkeys(urls))
        if not urls:
            raise ValueError("no upstream URLs: set POLAR_UPSTREAM_URLS")
        if urls == list(self.replicas):
            return False
        self.replicas = {u: self.replicas.get(u) or Replica(u) for u in urls}
        self.ring = HashRing(urls, self.vnodes)
        return True

    # ------------------------------------------------------------------ placement

    def order(self, key: str | None) -> Iterator[str]:
        """The replicas to try for a call, best first: its placement, then the others
        (healthy ones first) for when the placed one cannot be reached."""
        now = self.clock()
        up = [r for r in self.replicas.values() if r.up(now)]
        live = up or list(self.replicas.values())  # all down: try them all anyway
        first = self._place(key, live, now, all_down=not up)
        yield first
        if self.mode == "affine" and key is not None:
            others: Iterator[str] = self.ring.walk(key)
        else:
            others = iter(self.replicas)
        rest = [u for u in others if u != first]
        yield from sorted(rest, key=lambda u: not self.replicas[u].up(now))

    def _place(self, key: str | None, live: list[Replica], now: float, all_down: bool) -> str:
        if self.mode == "round_robin" or key is None:
            return live[next(self._turn) % len(live)].url
        bound = math.ceil(self.load_factor * (sum(r.inflight for r in live) + 1) / len(live))
        if self.max_inflight > 0:
            bound = min(bound, self.max_inflight)
        for url in self.ring.walk(key):
            replica = self.replicas[url]
            if replica.inflight < bound and (all_down or replica.up(now)):
                return url
        return min(live, key=lambda r: r.inflight).url  # all at their limit: least-loaded

    def acquire(self, url: str) -> None:
        """A call is being sent to `url`."""
        replica = self.replicas.get(url)
        if replica is not None:
            replica.inflight += 1
            replica.served += 1

    def release(self, url: str) -> None:
        """The call sent to `url` has its answer (or failed)."""
        replica = self.replicas.get(url)
        if replica is not None and replica.inflight > 0:
            replica.inflight -= 1

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
                "served": r.served,
                "failures": r.failures,
            }
            for r in self.replicas.values()
        ]

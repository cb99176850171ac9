"""Where each routing key lives: the affine router's table of assignments, bounded in memory.

An assignment names a key's home replica (and the replica its calls spill to while home
is saturated). A key is *held* by its home while it is live: expected to call again. A
finished session just stops calling, so a key stops being held once it has been silent
for `LIVE_GAPS` times its usual gap between calls (an average of its last gaps), at
least `LIVE_MIN_S` and at most `live_s` (`live_s` while its gap is unknown). It is
forgotten after `forget_s`, or sooner when the table holds `max_entries` (least recently
called first): memory stays bounded whatever the number of sessions ever seen. Each call
costs O(log n): a touch moves the key to the table's recent end and queues its expiry.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

LIVE_S = 60.0
LIVE_GAPS = 3.0
LIVE_MIN_S = 5.0
FORGET_S = 6 * 3600.0
MAX_ENTRIES = 100_000


@dataclass(slots=True)
class Assignment:
    """One key's placement."""

    home: str
    last: float
    """when the key was last called"""
    live: bool = True
    """counted in its home's sessions held"""
    spill: str | None = None
    """where its calls went the last time home was saturated: warm for its next spill"""
    gap: float = -1.0
    """its usual gap between calls, seconds (-1: not known yet)"""
    live_until: float = 0.0


class AssignmentTable:
    """Routing key → `Assignment`, least recently called first; `held(url, ±1)` is told
    when a key starts or stops being held by `url`."""

    def __init__(
        self,
        held: Callable[[str, int], None],
        *,
        live_s: float = LIVE_S,
        forget_s: float = FORGET_S,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self.live_s = live_s
        self.forget_s = max(forget_s, live_s)
        self.max_entries = max_entries
        self._held = held
        self.entries: OrderedDict[str, Assignment] = OrderedDict()
        self._expiries: list[tuple[float, str]] = []
        """(live until, key) per touch, a heap; a key touched again has a later one"""

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: str) -> Assignment | None:
        return self.entries.get(key)

    def touch(self, key: str, now: float) -> Assignment | None:
        """A call of `key`: live again, most recently called; None if it has no home."""
        entry = self.entries.get(key)
        if entry is None:
            return None
        if now > entry.last:
            gap = now - entry.last
            entry.gap = gap if entry.gap < 0 else 0.7 * entry.gap + 0.3 * gap
        entry.last = now
        if not entry.live:
            entry.live = True
            self._held(entry.home, 1)
        self.entries.move_to_end(key)
        live_s = self.live_s if entry.gap < 0 else LIVE_GAPS * entry.gap
        entry.live_until = now + min(self.live_s, max(LIVE_MIN_S, live_s))
        heapq.heappush(self._expiries, (entry.live_until, key))
        return entry

    def assign(self, key: str, home: str, now: float) -> Assignment:
        """Make `home` the key's home (a new key, or one that moves), live from now."""
        entry = self.entries.get(key)
        if entry is not None:
            if entry.live:
                self._held(entry.home, -1)
            entry.home, entry.spill, entry.live = home, None, False
        else:
            entry = self.entries[key] = Assignment(home, now, live=False)
        self.touch(key, now)
        while len(self.entries) > self.max_entries:  # the least recently called goes
            self._forget(next(iter(self.entries)))
        return entry

    def _forget(self, key: str) -> None:
        entry = self.entries.pop(key)
        if entry.live:
            self._held(entry.home, -1)

    def expire(self, now: float) -> None:
        """Stop holding keys silent past their live time; forget those idle past
        `forget_s`, and the least recently called past `max_entries`."""
        expiries, entries = self._expiries, self.entries
        while expiries and expiries[0][0] <= now:
            _, key = heapq.heappop(expiries)
            entry = entries.get(key)
            if entry is not None and entry.live and entry.live_until <= now:
                entry.live = False
                self._held(entry.home, -1)
        forget_before = now - self.forget_s
        while entries:
            key, entry = next(iter(entries.items()))
            if len(entries) <= self.max_entries and entry.last > forget_before:
                break
            self._forget(key)

    def held_by(self) -> dict[str, int]:
        """Live keys per home (to recount after the replica set changes)."""
        counts: dict[str, int] = {}
        for entry in self.entries.values():
            if entry.live:
                counts[entry.home] = counts.get(entry.home, 0) + 1
        return counts

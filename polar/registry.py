"""Things by kind: the one registry pattern of runtimes, harnesses, evaluators, builders and
pool kinds, and its one error.

A `Registry[T]` maps a kind (the name a spec gives) to its entry. `get` of a kind nobody
registered raises the registry's `UnknownKind` subclass, whose message names what was asked
for and every kind known: `unknown evaluator kind 'rubrc' (known: command, swebench)`.
`UnknownKind` is a LookupError and, for callers that check input with ValueError, a
ValueError too.

    EVALUATORS = Registry("evaluator kind", {e.kind: e for e in (A(), B())}, UnknownEvaluator)
    EVALUATORS.register("rubric", RubricEvaluator())
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["Registry", "UnknownKind"]

T = TypeVar("T")


class UnknownKind(LookupError, ValueError):
    """No entry is registered under this kind; `kind` and `known` say which was asked for and
    which there are (empty where the message says it another way)."""

    def __init__(self, message: str, kind: str | None = None, known: tuple[str, ...] = ()):
        super().__init__(message)
        self.kind = kind
        self.known = known


class Registry(Generic[T]):
    """Entries by kind, registered once each; `get` raises `unknown` (an UnknownKind) for a
    kind not registered. Iterating gives the kinds, like a mapping's keys."""

    def __init__(
        self,
        what: str,
        entries: Mapping[str, T] | None = None,
        unknown: type[UnknownKind] = UnknownKind,
    ) -> None:
        """`what` names a kind in messages ("evaluator kind"); `entries` are registered in
        order."""
        self.what = what
        self.unknown = unknown
        self._entries: dict[str, T] = {}
        for kind, entry in (entries or {}).items():
            self.register(kind, entry)

    def register(self, kind: str, entry: T) -> T:
        """Register `entry` under `kind` (a kind taken already is a ValueError); returns the
        entry, so a module-level `register` call can sit under a definition."""
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"a {self.what} is a non-empty string, not {kind!r}")
        if kind in self._entries:
            raise ValueError(f"{self.what} {kind!r} is registered already")
        self._entries[kind] = entry
        return entry

    def unregister(self, kind: str) -> T:
        """Remove `kind` (a test's own kind, registered for the test); returns its entry."""
        entry = self.get(kind)
        del self._entries[kind]
        return entry

    def get(self, kind: str) -> T:
        """The entry of `kind`; `unknown` naming it and the known kinds otherwise."""
        try:
            return self._entries[kind]
        except (KeyError, TypeError):  # TypeError: an unhashable kind from bad input
            raise self.unknown(self.unknown_message(kind), str(kind), self.kinds()) from None

    def unknown_message(self, kind: object) -> str:
        """The message of `get(kind)` for a kind not registered."""
        return f"unknown {self.what} {kind!r} (known: {', '.join(self.kinds())})"

    def kinds(self) -> tuple[str, ...]:
        """The registered kinds, sorted."""
        return tuple(sorted(self._entries))

    def items(self) -> tuple[tuple[str, T], ...]:
        """(kind, entry) in registration order."""
        return tuple(self._entries.items())

    def values(self) -> tuple[T, ...]:
        """The entries in registration order."""
        return tuple(self._entries.values())

    def __getitem__(self, kind: str) -> T:
        return self.get(kind)

    def __contains__(self, kind: object) -> bool:
        try:
            return kind in self._entries
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, kinds={list(self._entries)})"

"""Placements shared by every gateway: each routing key's home replica, one small S3 object.

The affine `Router` places a key by its own gateway's view of load, so two gateways (or
one restarted) would place a session apart. `SharedRoutes` makes the first placement the
one every gateway uses. The object `sessions/{id}/routes/{scope}/{chain}.json` holds the
home's URL; it is written with S3's conditional PUTs, so concurrent writers cannot both
win: a new key with `If-None-Match: *` (the first placement stays), a key re-placed
because its home was lost with `If-Match` on the object it read (one move wins). A writer
that loses reads the winner's placement and adopts it.

It costs no I/O on the hot path: a gateway reads the object only for a key it has no
home for whose prompt already has an answer in it (a session that began at another
gateway, or before this one restarted), or whose home it finds lost; it writes after
placing, in the background, while the call goes out.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import obstore
from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError

from polar.storage import Storage, session_prefix
from proxy.routing import Placement, Router

log = logging.getLogger("polar.gateway")

__all__ = ["SharedRoutes", "route_object_key"]

MAX_PENDING_MOVES = 10_000


def route_object_key(key: str, scope: str = "policy") -> str:
    """The S3 key holding routing key `key`'s placement (`session/chain` or `session`)."""
    session_id, _, chain = key.partition("/")
    return f"{session_prefix(session_id)}routes/{scope}/{chain or 'session'}.json"


def has_answer(messages: Any) -> bool:
    """Whether a prompt holds an earlier answer (not a session's first call)."""
    return isinstance(messages, list) and any(
        isinstance(m, dict) and m.get("role") == "assistant" for m in messages
    )


class SharedRoutes:
    """Reads and writes one `Router`'s placements in the bucket (`scope`: which client)."""

    def __init__(self, storage: Storage, router: Router, scope: str = "policy") -> None:
        self.storage = storage
        self.router = router
        self.scope = scope
        self._etags: dict[str, str] = {}
        """the version of a lost placement read, for the move's conditional write"""
        self._writes: set[asyncio.Task[None]] = set()
        self.reads = 0
        self.adopted = 0
        self.conflicts = 0

    async def before(self, key: str, messages: Any) -> None:
        """Before `key` is placed: adopt its shared home if this gateway has none it can
        use (and the call is not the key's first), so every gateway sends it alike."""
        router = self.router
        home = router.home_of(key)
        if home is not None:
            replica = router.replicas.get(home)
            if replica is not None and replica.up(router.clock()):
                return  # the fast path: no I/O
        elif not has_answer(messages):
            return  # a first call: nothing is stored yet
        stored = await self._read(key)
        if stored is not None and router.adopt(key, stored[0]):
            self.adopted += 1
            self._etags.pop(key, None)
        elif stored is not None:
            if len(self._etags) >= MAX_PENDING_MOVES:  # keys that never called again
                self._etags.clear()
            self._etags[key] = stored[1]  # lost here too: the move replaces that version

    def placed(self, key: str, placement: Placement) -> None:
        """After `key` is placed: share a new or moved placement (in the background)."""
        if placement.event not in ("new", "move"):
            return
        task = asyncio.get_running_loop().create_task(self._write(key, placement.url))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def drain(self) -> None:
        """Wait for the writes under way (tests, shutdown)."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    async def _read(self, key: str) -> tuple[str, str] | None:
        self.reads += 1
        try:
            got = await obstore.get_async(self.storage.store, route_object_key(key, self.scope))
            body = json.loads(bytes(await got.bytes_async()))
        except (NotFoundError, FileNotFoundError):
            return None
        except Exception as exc:  # noqa: BLE001 - S3 trouble: route on this gateway's view
            log.warning("cannot read the shared placement of %s: %s", key, exc)
            return None
        url = body.get("url") if isinstance(body, dict) else None
        return (url, got.meta["e_tag"] or "") if isinstance(url, str) else None

    async def _write(self, key: str, url: str) -> None:
        """Write `key`'s placement conditionally: created if none is stored, replaced only
        if what is stored is the version read (a lost home); a writer that loses adopts
        the stored placement, or replaces it if this gateway finds it lost too."""
        etag = self._etags.pop(key, None)
        data = json.dumps({"url": url}).encode()
        for _ in range(3):
            mode: Any = {"e_tag": etag} if etag else "create"
            try:
                target = route_object_key(key, self.scope)
                await obstore.put_async(self.storage.store, target, data, mode=mode)
                return
            except (AlreadyExistsError, PreconditionError):
                self.conflicts += 1
                stored = await self._read(key)
                if stored is not None and self.router.adopt(key, stored[0]):
                    self.adopted += 1  # another gateway placed it first: take its placement
                    return
                etag = stored[1] if stored is not None else None
            except Exception as exc:  # noqa: BLE001 - unshared, the call still goes out
                log.warning("cannot share the placement of %s: %s", key, exc)
                return

"""Which sessions may still call: a key stops working when its session or attempt closes.

The worker marks an attempt closed when its harness run ends and the whole
session at teardown (`Storage.mark_closed`). The gateway checks the marker on
S3 before serving a call, with a short cache: a closed answer is kept for good
(a session never reopens), an open one for `open_ttl_s`, so a busy session
costs one S3 listing every few seconds, not one per call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

from polar.providers import APIError
from polar.session_keys import SessionIdentity
from polar.storage import Storage

CLOSED_CODE = "session_closed"
log = logging.getLogger("polar.gateway")


class SessionGate:
    """Refuses the calls of closed sessions (403 `session_closed`), cached per session."""

    def __init__(self, storage: Storage, open_ttl_s: float = 2.0, max_entries: int = 10_000):
        self.storage = storage
        self.open_ttl_s = open_ttl_s
        self.max_entries = max_entries
        self._markers: OrderedDict[str, tuple[float, set[str]]] = OrderedDict()

    async def _closed_markers(self, session_id: str) -> set[str]:
        now = time.monotonic()
        cached = self._markers.get(session_id)
        if cached is not None and ("session" in cached[1] or now - cached[0] < self.open_ttl_s):
            self._markers.move_to_end(session_id)
            return cached[1]
        markers = await asyncio.to_thread(self.storage.closed_markers, session_id)
        self._markers[session_id] = (now, markers)
        self._markers.move_to_end(session_id)
        while len(self._markers) > self.max_entries:
            self._markers.popitem(last=False)
        return markers

    async def check(self, identity: SessionIdentity) -> None:
        """Raise a 403 in the caller's shape if the identity's session or attempt has closed."""
        try:
            markers = await self._closed_markers(identity.session_id)
        except Exception as exc:  # noqa: BLE001 - S3 unreachable: the call could not be
            # recorded either (the recorder answers 503), so nothing unrecorded or closed
            # can be trained; the recorder's error is the one the caller gets
            log.warning("could not check whether %s is closed: %s", identity.session_id, exc)
            return
        if "session" in markers or f"attempt-{identity.attempt}" in markers:
            raise APIError(
                403,
                f"session {identity.session_id} (attempt {identity.attempt}) has ended: "
                "its key no longer records calls",
                code=CLOSED_CODE,
            )

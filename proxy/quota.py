"""Bounds on what a session may store: one record's size, and all its records' bytes.

`RecordLimits.check` runs on the encoded record, just before it is written:
a record over `max_record_bytes` is refused 413 `record_too_large`, one that
would take its session past `max_session_bytes` 403 `session_quota_exceeded`
(not 429: SDKs retry a 429, and this session's next call is refused alike).
Either way nothing is written, so nothing recorded before is lost, and the
caller never gets an answer that was not recorded. A session whose room left
is less than its last record took is refused before its call goes upstream
(`check_room`): a session's calls grow with its context, so the next one
would not fit either, and nothing is sampled for nothing.

A session's bytes are its records' sizes as S3 lists them (every gateway's),
re-listed when older than `ttl_s`, plus what this gateway wrote since: with
several gateways a session may pass its quota by what the others wrote in
`ttl_s`, no more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

from polar.providers import APIError
from polar.storage import Storage

log = logging.getLogger("polar.gateway")
LIST_TTL_S = 30.0


class RecordTooLarge(APIError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            413,
            f"this call's record would take {size} bytes; the gateway stores at most {limit} "
            "bytes per call (POLAR_MAX_RECORD_BYTES): send a smaller request",
            type="invalid_request_error",
            code="record_too_large",
        )


class QuotaExceeded(APIError):
    def __init__(self, session_id: str, used: int, limit: int) -> None:
        super().__init__(
            403,
            f"session {session_id} has stored {used} bytes of records; it may store at most "
            f"{limit} (POLAR_MAX_SESSION_BYTES): it records no more calls",
            type="permission_error",
            code="session_quota_exceeded",
        )


class RecordLimits:
    """The record size limit and the per-session quota (0: off), cached per session."""

    def __init__(
        self,
        storage: Storage,
        max_record_bytes: int,
        max_session_bytes: int,
        ttl_s: float = LIST_TTL_S,
        max_entries: int = 10_000,
    ) -> None:
        self.storage = storage
        self.max_record_bytes = max_record_bytes
        self.max_session_bytes = max_session_bytes
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._used: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._last: dict[str, int] = {}

    async def _stored(self, session_id: str) -> int:
        now = time.monotonic()
        cached = self._used.get(session_id)
        if cached is None or now - cached[0] >= self.ttl_s:
            listed = getattr(self.storage, "completion_bytes", None)
            try:
                used = await asyncio.to_thread(listed, session_id) if listed else 0
            except Exception as exc:  # noqa: BLE001 - S3 unreachable: the write fails anyway
                log.warning("could not list the records of %s: %s", session_id, exc)
                used = cached[1] if cached else 0
            cached = (now, used)
            self._used[session_id] = cached
        self._used.move_to_end(session_id)
        while len(self._used) > self.max_entries:
            dropped, _ = self._used.popitem(last=False)
            self._last.pop(dropped, None)
        return cached[1]

    async def check_room(self, session_id: str) -> None:
        """403 if the session has no room left for a record the size of its last one."""
        if self.max_session_bytes > 0:
            used = await self._stored(session_id)
            if used + self._last.get(session_id, 1) > self.max_session_bytes:
                raise QuotaExceeded(session_id, used, self.max_session_bytes)

    async def check(self, session_id: str, size: int) -> None:
        """413 / 403 if a record of `size` bytes may not be stored for the session."""
        if 0 < self.max_record_bytes < size:
            raise RecordTooLarge(size, self.max_record_bytes)
        if self.max_session_bytes > 0:
            used = await self._stored(session_id)
            if used + size > self.max_session_bytes:
                raise QuotaExceeded(session_id, used, self.max_session_bytes)

    def stored(self, session_id: str, size: int) -> None:
        """Count a record this gateway wrote (until the next listing sees it)."""
        cached = self._used.get(session_id)
        if cached is not None:
            self._used[session_id] = (cached[0], cached[1] + size)
            self._last[session_id] = size

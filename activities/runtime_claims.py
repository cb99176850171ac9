"""Which placement holds a session's runtime on this host: a claim made by each prepare.

A session placed again on the same host (a host given up as lost that answers again, a
runtime renewed after an infra error) has a runtime of the same id there. The release the
workflow sent for the earlier placement's runtime is not always awaited (a lost host's is
not), so it may run after the new placement's prepare began, and must not remove the new
runtime or kill its processes (the chaos soak saw one kill the new prepare's action).

So each prepare first claims the session's runtime on this host with a fresh id, which
goes into its `RuntimeHandle.runtime_id`; a release or teardown carrying an id removes
the runtime only while the claim is still its own, under the same lock (a prepare that
claims meanwhile waits until the removal is done). A handle without an id (a bare one, or
made by older code) is removed as before. Claims are files under
`{data_dir}/runtime-claims/`, the worker's own, out of every sandbox's reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

from polar.ids import checked_id

CLAIMS_DIR = "runtime-claims"


class RuntimeClaims:
    """The claims of one host's data dir: a file per session, its content the claim, locked
    (flock) while it is read or changed, removed with the runtime."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = Path(data_dir) / CLAIMS_DIR

    def _path(self, session_id: str) -> Path:
        return self.dir / checked_id(session_id, "session id")  # InvalidId: never a path

    @contextlib.asynccontextmanager
    async def _locked(self, session_id: str) -> AsyncIterator[int]:
        """The session's claim file, open and exclusively locked (taken in a thread: a lock
        another task of this process holds must not block the event loop). A file removed
        while this waited for its lock is opened anew."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self._path(session_id)
        while True:
            fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
            try:
                await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
                try:
                    current = os.stat(path, follow_symlinks=False).st_ino
                except FileNotFoundError:
                    current = None
                if current == os.fstat(fd).st_ino:
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # dropped meanwhile: lock the file that is there now
        try:
            yield fd
        finally:
            os.close(fd)  # releases the lock

    async def claim(self, session_id: str) -> str:
        """A fresh claim on the session's runtime here: any release of an earlier placement
        from now on leaves it alone."""
        claim = secrets.token_hex(8)
        async with self._locked(session_id) as fd:
            os.ftruncate(fd, 0)
            os.pwrite(fd, claim.encode(), 0)
        return claim

    async def drop(self, session_id: str, claim: str) -> None:
        """Forget `claim` where it is still the last (its prepare failed: no runtime holds
        it), so no claim file outlives a runtime that was never made."""
        async with self.held(session_id, claim):
            pass

    @contextlib.asynccontextmanager
    async def held(self, session_id: str, claim: str) -> AsyncIterator[bool]:
        """Whether `claim` still holds the session's runtime here (no claim on record: an
        older runtime, or one already removed: it does), kept so while the caller removes
        it; the claim is dropped with it."""
        async with self._locked(session_id) as fd:
            current = os.pread(fd, 64, 0).decode(errors="replace")
            mine = current in ("", claim)
            yield mine
            if mine:
                with contextlib.suppress(FileNotFoundError):
                    self._path(session_id).unlink()

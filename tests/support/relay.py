"""TCP relays in a thread: a listener on one address spliced byte for byte to another.

The namespace hosts of tests/system/test_multi_host_netns.py reach the suite's one
Temporal and one S3 (bound on the root namespace's loopback, which a namespace
cannot reach) through relays listening on the root-side veth address only.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

Address = tuple[str, int]
Splice = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then pass the EOF on (half-close)."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


def _splicer(target: Address) -> Splice:
    """A connection handler that splices each connection to `target`."""

    async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                end.close()

    return splice


@contextmanager
def tcp_relays(routes: list[tuple[Address, Address]]) -> Iterator[None]:
    """Serve each (listen, target) route until the block ends."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="tcp-relays", daemon=True)
    thread.start()
    servers: list[asyncio.Server] = []
    try:
        for listen, target in routes:
            start = asyncio.start_server(_splicer(target), *listen)
            servers.append(asyncio.run_coroutine_threadsafe(start, loop).result(timeout=10))
        yield
    finally:
        for server in servers:
            loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)

"""The in-sandbox end of a session's gateway channel: TCP on loopback -> the relay's Unix socket.

Runs inside the session's image (or the local sandbox) with the system
`python3`, so it uses only the standard library (Python 3.9+). Each TCP
connection gets its own Unix-socket connection and bytes are spliced both
ways unchanged; a half-close on one side is passed on to the other, so
keep-alive, large bodies and SSE streams behave as on a direct connection.

    python3 forwarder.py --socket /run/polar/gateway.sock --port 4000 [--host 127.0.0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable

CHUNK = 64 * 1024


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy `reader` to `writer` until EOF, then half-close `writer`."""
    while True:
        data = await reader.read(CHUNK)
        if not data:
            break
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def handler(socket_path: str) -> Handler:
    """A connection handler splicing each TCP connection to a new connection to `socket_path`."""

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            relay_r, relay_w = await asyncio.open_unix_connection(socket_path)
        except OSError as exc:
            print(f"forwarder: cannot reach {socket_path}: {exc}", file=sys.stderr, flush=True)
            await close(client_w)
            return
        up = asyncio.ensure_future(pump(client_r, relay_w))
        down = asyncio.ensure_future(pump(relay_r, client_w))
        try:
            # a reset on either side ends both directions; a clean EOF ends only its own
            pending = {up, down}
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if any(t.exception() is not None for t in done):
                    break
        finally:
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
            await close(relay_w)
            await close(client_w)

    return handle


async def serve(socket_path: str, host: str, port: int) -> None:
    server = await asyncio.start_server(handler(socket_path), host, port, reuse_address=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="the relay's Unix socket")
    parser.add_argument("--port", type=int, required=True, help="TCP port to serve")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve (default loopback)")
    args = parser.parse_args(argv)
    socket_path = args.socket
    if len(socket_path.encode()) > 100:  # past sun_path's 108 bytes: connect from its dir
        os.chdir(os.path.dirname(socket_path) or ".")
        socket_path = os.path.basename(socket_path)
    try:
        asyncio.run(serve(socket_path, args.host, args.port))
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"forwarder: cannot serve {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

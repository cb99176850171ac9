"""The in-sandbox end of a session's gateway channel: TCP on loopback -> the relay's Unix socket.

Runs inside the session's image (or the local sandbox) with the system
`python3`, so it uses only the standard library (Python 3.9+). Each TCP
connection gets its own Unix-socket connection and bytes are spliced both
ways unchanged, a thread per direction; a half-close on one side is passed
on to the other, so keep-alive, large bodies and SSE streams behave as on a
direct connection. Threads, not asyncio: importing asyncio alone costs the
sandbox's `python3` about 80 ms, on every session's start.

    python3 forwarder.py --socket /run/polar/gateway.sock --port 4000 [--host 127.0.0.1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading

CHUNK = 64 * 1024


def _shut(sock: socket.socket, how: int) -> None:
    with contextlib.suppress(OSError):  # already closed or reset
        sock.shutdown(how)


def pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy `src` to `dst` until EOF, then half-close `dst`; a reset on either side ends
    both directions (a clean EOF ends only its own)."""
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            dst.sendall(data)
        _shut(dst, socket.SHUT_WR)
    except OSError:
        _shut(src, socket.SHUT_RDWR)
        _shut(dst, socket.SHUT_RDWR)


def splice(client: socket.socket, socket_path: str) -> None:
    """Splice one TCP connection to a new connection to `socket_path`, both ways."""
    relay = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        relay.connect(socket_path)
    except OSError as exc:
        print(f"forwarder: cannot reach {socket_path}: {exc}", file=sys.stderr, flush=True)
        relay.close()
        client.close()
        return
    up = threading.Thread(target=pump, args=(client, relay), daemon=True)
    up.start()
    pump(relay, client)
    up.join()
    relay.close()
    client.close()


def serve(socket_path: str, host: str, port: int) -> None:
    """Accept on `host:port` forever, each connection spliced on its own threads."""
    with socket.create_server((host, port), backlog=128) as server:  # SO_REUSEADDR
        while True:
            client, _ = server.accept()
            # small writes go out at once, as on asyncio's TCP transports
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=splice, args=(client, socket_path), daemon=True).start()


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
        serve(socket_path, args.host, args.port)
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"forwarder: cannot serve {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The in-sandbox end of a session's gateway channel: TCP on loopback -> the relay's Unix socket.

(The egress proxy's socket, activities/runtimes/network/egress.py, is served the same way on its
own port: one more forwarder, nested.)

Runs inside the session's image (or the local sandbox) with the system
`python3`, so it uses only the standard library (Python 3.9+). Each TCP
connection gets its own Unix-socket connection and bytes are spliced both
ways unchanged, a thread per direction; a half-close on one side is passed
on to the other, so keep-alive, large bodies and SSE streams behave as on a
direct connection. Every session's run starts it, so it imports only modules
built into the interpreter (`_socket`, `_thread`, `_signal`, `os`): asyncio
alone costs the sandbox's `python3` about 80 ms, and `socket`, `threading`
and `signal` (with the `enum` and `selectors` they import) about 15 ms of CPU.

With a command after `--`, it binds the port, forks the forwarder into the
background and execs the command in its own place: the port accepts
connections before the command's first instruction, with no readiness polling
(`channel_paths.with_forwarder`). A port that cannot be bound ends it with exit 97
before the command runs.

    python3 -I -S forwarder.py --socket /run/polar/gateway.sock --port 4000 \
        [--host 127.0.0.1] [--log FILE] [-- bash -c COMMAND]
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stub; `signal` would import enum
import _socket
import _thread
import os
import sys

CHUNK = 64 * 1024
Socket = _socket.socket


def _shut(sock: Socket, how: int) -> None:
    try:  # noqa: SIM105 - contextlib.suppress would cost an import
        sock.shutdown(how)
    except OSError:  # already closed or reset
        pass


def pump(src: Socket, dst: Socket) -> None:
    """Copy `src` to `dst` until EOF, then half-close `dst`; a reset on either side ends
    both directions (a clean EOF ends only its own)."""
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            dst.sendall(data)
        _shut(dst, _socket.SHUT_WR)
    except OSError:
        _shut(src, _socket.SHUT_RDWR)
        _shut(dst, _socket.SHUT_RDWR)


def splice(client: Socket, socket_path: str) -> None:
    """Splice one TCP connection to a new connection to `socket_path`, both ways."""
    relay = Socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        relay.connect(socket_path)
    except OSError as exc:
        print(f"forwarder: cannot reach {socket_path}: {exc}", file=sys.stderr, flush=True)
        relay.close()
        client.close()
        return
    up_done = _thread.allocate_lock()
    up_done.acquire()

    def up() -> None:
        try:
            pump(client, relay)
        finally:
            up_done.release()

    _thread.start_new_thread(up, ())
    pump(relay, client)
    up_done.acquire()  # the other direction has ended too
    relay.close()
    client.close()


def listen(host: str, port: int) -> Socket:
    """A TCP socket listening on `host:port` (SO_REUSEADDR, as socket.create_server)."""
    server = Socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        server.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        server.bind((host, port))
        server.listen(128)
    except OSError:
        server.close()
        raise
    return server


def serve(server: Socket, socket_path: str) -> None:
    """Accept on `server` forever, each connection spliced on its own threads."""
    while True:
        fd, _ = server._accept()  # type: ignore[attr-defined]  # what socket.accept wraps
        client = Socket(fileno=fd)
        # small writes go out at once, as on asyncio's TCP transports
        client.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        _thread.start_new_thread(splice, (client, socket_path))


def _detach(log: str) -> None:
    """In the forked forwarder: no stdin or stdout of the command's, stderr to `log`."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        err = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        err = null
    for fd, target in ((0, null), (1, null), (2, err)):
        os.dup2(target, fd)


USAGE = "usage: forwarder.py --socket PATH --port N [--host ADDR] [--log FILE] [-- COMMAND...]"
OPTIONS = {"--socket": "socket", "--port": "port", "--host": "host", "--log": "log"}


def parse(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """`--name value` options (OPTIONS) and the command after `--`; SystemExit(2) with the
    usage otherwise. By hand: argparse (and the `re` it imports) costs each start ~10 ms."""
    options = {"host": "127.0.0.1", "log": os.devnull}
    rest = list(args)
    while rest and rest[0] != "--":
        flag = rest.pop(0)
        if flag not in OPTIONS or not rest:
            sys.exit(f"{USAGE}\nforwarder.py: bad argument {flag!r}")
        options[OPTIONS[flag]] = rest.pop(0)
    if "socket" not in options or not options.get("port", "").isdigit():
        sys.exit(f"{USAGE}\nforwarder.py: --socket and a numeric --port are required")
    return options, rest[1:]


def main(argv: list[str] | None = None) -> int:
    options, command = parse(sys.argv[1:] if argv is None else argv)
    host, port = options["host"], int(options["port"])
    try:
        server = listen(host, port)
    except OSError as exc:
        print(
            f"polar: the forwarder did not start on {host}:{port}: {exc}",
            file=sys.stderr,
            flush=True,
        )
        return 97
    if command:
        if os.fork() != 0:  # the command, in this process's place: the port already listens
            server.close()
            for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):  # python ignores them; exec keeps that
                _signal.signal(sig, _signal.SIG_DFL)
            try:
                os.execvp(command[0], command)
            except OSError as exc:
                print(f"polar: cannot run {command[0]}: {exc}", file=sys.stderr, flush=True)
                return 127
        _detach(options["log"])
    socket_path = options["socket"]
    if len(socket_path.encode()) > 100:  # past sun_path's 108 bytes: connect from its dir
        os.chdir(os.path.dirname(socket_path) or ".")
        socket_path = os.path.basename(socket_path)
    try:
        serve(server, socket_path)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The harness-started marker: how the worker knows the sandbox really reached the harness.

A harness command that exits 1 may be a policy that failed, or a sandbox that
never started (`nsenter`, `unshare`, `setpriv`, `bwrap` or the engine failing;
the gateway forwarder refusing to start; a missing `bash`). Only the first is a
verdict on the policy. So the run stage wraps the harness command (inside the
gateway forwarder, so after it: `with_forwarder(marker.wrap(command))`): the
sandbox's bash, once it is up, writes one line with a fresh per-run nonce before
the harness command's first line. No line with this run's nonce means the
harness never began, and the session's failure is infra (`sandbox_start`).

The line is written before any harness code runs, so the harness cannot stop it
being written; the nonce is made by the worker per run, so no earlier run's line
counts. What it must not do either is erase it afterwards, so the line goes
where the harness cannot reach:

- `local` (root's sandbox and bwrap: the worker starts the sandbox itself):
  a pipe of the worker's (`Pipe`). Its write end, and the read end of a second
  pipe (the gate), are passed to the sandbox as extra descriptors; the wrapper
  writes the line to the first, then waits on the gate, which the worker's
  reader opens (closes its end) only once it has read and judged the line; the
  wrapper then closes both descriptors and the harness command runs. So the
  worker has its verdict before any harness code runs: nothing the harness does
  later (truncate its stderr log, whose descriptor it holds; open a leftover
  copy of the pipe through /proc) can erase it, and nothing it writes counts
  (only the first line is read, and the worker's read end is closed after it).
- containers (docker, podman): stderr (`with_marker`, `seen`): the engine
  streams it into a file on the worker that the sandbox cannot reach.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import shlex
import threading
from pathlib import Path

PREFIX = "polar: harness started "
HEAD_BYTES = 64 * 1024
"""How much of the stderr log's head is searched (the marker is its first line but for the
runtime's own notes)."""
LINE_MAX = 256
"""The most a `Pipe` reads before it judges (the marker line is ~50 bytes)."""


def new_nonce() -> str:
    """A fresh marker nonce for one run."""
    return secrets.token_hex(12)


def line(nonce: str) -> str:
    return PREFIX + nonce


def with_marker(command: str, nonce: str) -> str:
    """`command` preceded by a line that writes the marker to stderr (a builtin of the same
    bash: nothing else has to be on the sandbox's PATH for it)."""
    return f"printf '%s\\n' {shlex.quote(line(nonce))} >&2\n{command}"


def seen(stderr: Path, nonce: str) -> bool:
    """Whether the run's stderr log holds this run's marker line near its head."""
    try:  # no-follow: never read through a link left in the log's place
        fd = os.open(stderr, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as log:
        head = log.read(HEAD_BYTES)
    return line(nonce).encode() + b"\n" in head


class Pipe:
    """The marker's channel for a sandbox the worker starts itself (`local`): see the module
    docstring. Pass `fds` to the sandbox's process (`pass_fds`), run `wrap(command)` in it,
    and `close()` once the run is over: whether the marker came. The reader is a thread of
    its own from the start (the wrapper waits on it)."""

    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        # non-inheritable: no other child of the worker gets them (pass_fds gives them to one)
        self._read, self._write = os.pipe()
        self._gate_read, self._gate_write = os.pipe()
        self._wake_read, self._wake_write = os.pipe()  # `close` stops the reader at once
        self._seen = False
        self._closed = False
        self._thread = threading.Thread(target=self._watch, name="polar-marker", daemon=True)
        self._thread.start()

    @property
    def fds(self) -> tuple[int, int]:
        """The sandbox's ends: the marker's write end, the gate's read end."""
        return self._write, self._gate_read

    def wrap(self, command: str) -> str:
        """`command` preceded by the marker line to the pipe, the wait on the gate, and the
        close of both descriptors (builtins of the same bash)."""
        out, gate = self.fds
        return (
            f"printf '%s\\n' {shlex.quote(line(self.nonce))} >&{out} && read -r -u {gate} _; "
            f"exec {out}>&- {gate}<&-\n{command}"
        )

    def _watch(self) -> None:
        got = b""
        poll = select.poll()  # not select(): a busy worker's descriptors pass 1024
        poll.register(self._read, select.POLLIN)
        poll.register(self._wake_read, select.POLLIN)
        try:
            while b"\n" not in got and len(got) < LINE_MAX:
                ready = {fd for fd, _ in poll.poll()}
                if self._wake_read in ready:
                    break
                chunk = os.read(self._read, LINE_MAX)
                if not chunk:
                    break
                got += chunk
            self._seen = got.split(b"\n", 1)[0] == line(self.nonce).encode() and b"\n" in got
        finally:
            os.close(self._read)  # nothing more is read: a later write fails (EPIPE)
            os.close(self._gate_write)  # the wrapper goes on
            os.close(self._wake_read)

    def close(self) -> bool:
        """The worker's ends closed, the reader stopped (at once): whether this run's marker
        came."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError):  # the reader may be done already
                os.write(self._wake_write, b".")
            self._thread.join()
            for fd in (*self.fds, self._wake_write):
                with contextlib.suppress(OSError):
                    os.close(fd)
        return self._seen

"""The harness-started marker: how the worker knows the sandbox really reached the harness.

A harness command that exits 1 may be a policy that failed, or a sandbox that
never started (`nsenter`, `unshare`, `setpriv` or the engine failing; the
gateway forwarder refusing to start; a missing `bash`). Only the first is a
verdict on the policy. So the run stage wraps the harness command (inside the
gateway forwarder, so after it: `with_forwarder(with_marker(command, nonce))`):
the sandbox's bash, once it is up, writes one line with a fresh per-run nonce
to the command's stderr before the harness command's first line. The worker reads the head of
that stderr log once the run is over: no line with this run's nonce means the
harness never began, and the session's failure is infra (`sandbox_start`).

The line is written before any harness code runs, so the harness cannot stop
it being written; the nonce is made by the worker per run, so no earlier run's
line counts. In the container runtimes the engine streams stderr into a file on
the worker that the sandbox cannot reach; in the `local` runtime the harness
holds that file's descriptor and could truncate it (it then turns its own
failure into an infra error, which is retried and still never scores: see
docs/operations.md, faults).
"""

from __future__ import annotations

import os
import secrets
import shlex
from pathlib import Path

PREFIX = "polar: harness started "
HEAD_BYTES = 64 * 1024
"""How much of the stderr log's head is searched (the marker is its first line but for the
runtime's own notes)."""


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

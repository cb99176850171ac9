"""Ports for tests that need an address nothing answers on."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def refusing_port() -> Iterator[int]:
    """A loopback port bound but never listening while the block runs: a connection is
    refused, and no server the test starts next (on a `free_port()`) can be given it."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        yield hole.getsockname()[1]

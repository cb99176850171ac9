"""Ports for tests that need an address nothing answers on."""

from __future__ import annotations

import random
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


def free_port(span: int = 1) -> int:
    """A loopback port such that `span` consecutive ports from it can be bound.

    Picked below Linux's ephemeral range (32768+), so outgoing connections of
    other programs cannot take it between the pick and the server's start.
    """
    rng = random.Random()
    for _ in range(1000):
        base = rng.randrange(20000, 32700 - span)
        if all(_bindable(base + i) for i in range(span)):
            return base
    raise RuntimeError(f"no {span} free consecutive ports in 20000-32700")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True

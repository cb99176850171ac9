"""Ports for tests that need an address nothing answers on."""

from __future__ import annotations

import os
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


PORTS = range(20000, 32700)
"""Where tests pick ports: below Linux's ephemeral range (32768+), so outgoing connections of
other programs cannot take one between the pick and the server's start."""


def worker_ports(ports: range = PORTS) -> range:
    """This pytest-xdist worker's share of `ports` (all of them outside xdist): two workers
    never pick the same port between one's pick and its server's start."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count <= 1:
        return ports
    size = len(ports) // count
    first = ports.start + int(worker[2:]) * size
    return range(first, first + size)


def free_port(span: int = 1) -> int:
    """A loopback port of `worker_ports()` such that `span` consecutive ports from it can be
    bound."""
    ports = worker_ports()
    rng = random.Random()
    for _ in range(1000):
        base = rng.randrange(ports.start, ports.stop - span)
        if all(_bindable(base + i) for i in range(span)):
            return base
    raise RuntimeError(f"no {span} free consecutive ports in {ports.start}-{ports.stop - 1}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True

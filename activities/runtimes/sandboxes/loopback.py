"""A network namespace of the worker's with only loopback up: where a sealed local command runs.

The worker makes it itself (`new_loopback`: a thread unshares it, brings `lo` up and
leaves; the worker holds it by a descriptor), not by a process per command; a command
joins it with `nsenter` through the worker's own descriptor (`Loopback.nsenter_path`).
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import socket
import struct
import threading
from dataclasses import dataclass, field

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = struct.Struct("16sh22x")  # struct ifreq: the name, then ifr_flags (of a 40-byte union)


@dataclass
class Loopback:
    """A network namespace with only `lo` (up), made and held by the worker: commands
    join it through `nsenter_path`; `listener`, when asked for, is a TCP socket of the
    worker's listening on 127.0.0.1:port inside it. `close()` lets it go (the kernel
    frees it once no process is left in it)."""

    ns_fd: int
    listener: socket.socket | None = None
    _closed: bool = field(default=False, repr=False)

    @property
    def nsenter_path(self) -> str:
        """How a process of the worker's (root) opens the namespace: the worker's own fd."""
        return f"/proc/{os.getpid()}/fd/{self.ns_fd}"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.listener is not None:
            self.listener.close()
        os.close(self.ns_fd)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _unshare_net() -> None:
    """Move the calling thread into a new network namespace (Python 3.11 has no os.unshare)."""
    if _libc().unshare(CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare(CLONE_NEWNET): {os.strerror(errno)}")


def _make_loopback(port: int | None) -> Loopback:
    """In the calling thread (which it leaves in the new namespace): see `new_loopback`."""
    _unshare_net()
    ns_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as ctl:
            got = fcntl.ioctl(ctl.fileno(), SIOCGIFFLAGS, IFREQ.pack(b"lo", 0))
            flags = IFREQ.unpack(got)[1]
            fcntl.ioctl(ctl.fileno(), SIOCSIFFLAGS, IFREQ.pack(b"lo", flags | IFF_UP))
        listener = socket.create_server(("127.0.0.1", port), backlog=128) if port else None
    except BaseException:
        os.close(ns_fd)
        raise
    return Loopback(ns_fd, listener)


def new_loopback(port: int | None = None) -> Loopback:
    """A fresh `Loopback` (listening on `port` inside it when given), made on a thread of
    its own that ends right after, so no thread of the worker stays in that namespace.
    About 1 ms of CPU, against a process per command (`unshare --net`, `ip link set lo
    up`) before. OSError where the worker may not make network namespaces."""
    made: list[Loopback] = []
    failed: list[BaseException] = []

    def body() -> None:
        try:
            made.append(_make_loopback(port))
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=body, name="polar-netns", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]

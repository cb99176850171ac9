"""Network audit of a harness run: every connect() of its process tree, traced with strace.

`traced(argv, file)` wraps a command in strace (None where ptrace is not
allowed); `foreign_connects(file, port)` lists connections to anything but the
gateway. How each harness is configured lives in activities/harnesses/.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

# --------------------------------------------------------------------------- network audit

_CONNECT = re.compile(r"connect\(\d+, \{sa_family=(AF_[A-Z0-9]+)(?P<rest>[^}]*)\}")
_PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
_ADDR4 = re.compile(r'sin_addr=inet_addr\("([^"]+)"\)')
_ADDR6 = re.compile(r'inet_pton\(AF_INET6, "([^"]+)"')
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


@functools.cache
def _strace() -> str | None:
    """strace, if it is installed and may trace here (ptrace can be forbidden in containers)."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    probe = [strace, "-f", "-qq", "--seccomp-bpf", "-e", "trace=connect", "-o", os.devnull, "true"]
    ok = subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    return strace if ok else None


def traced(argv: list[str], trace_file: Path) -> list[str] | None:
    """`argv` under strace, logging every connect() of its process tree; None if it cannot."""
    strace = _strace()
    if strace is None:
        return None
    flags = ["-f", "-qq", "--seccomp-bpf", "-e", "trace=connect", "-o", str(trace_file)]
    return [strace, *flags, *argv]


def network_connects(trace_file: Path) -> list[tuple[str, str, int]]:
    """(family, address, port) of every IP connect() in a strace log."""
    out = []
    text = trace_file.read_text() if trace_file.exists() else ""
    for m in _CONNECT.finditer(text):
        family, rest = m.group(1), m.group("rest")
        if family not in ("AF_INET", "AF_INET6"):
            continue
        port = _PORT.search(rest)
        addr = _ADDR4.search(rest) or _ADDR6.search(rest)
        out.append((family, addr.group(1) if addr else "?", int(port.group(1)) if port else -1))
    return out


def foreign_connects(trace_file: Path, allowed_port: int) -> list[tuple[str, str, int]]:
    """Connects to anything but the gateway (loopback, `allowed_port`)."""
    return [
        c for c in network_connects(trace_file) if not (c[1] in LOOPBACK and c[2] == allowed_port)
    ]

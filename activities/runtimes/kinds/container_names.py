"""Container names of sessions: the same on every worker of a deployment, whatever its data dir."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

__all__ = ["container_name", "root_namespace"]


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def container_name(session_id: str, namespace: str) -> str:
    """A docker-safe, deterministic container name for a session of `namespace` (the
    deployment's task queue): the same on every worker, whatever its data dir."""
    return f"polar-{_safe(namespace)}-{_safe(session_id)}"[:200]


def root_namespace(root: Path) -> str:
    """The namespace of a runtime made without one: a hash of its root (tests, benchmarks)."""
    return hashlib.sha256(str(root).encode()).hexdigest()[:8]

"""Runtimes by kind: `local` (the zero-setup default), `docker`, `podman`, and `auto` (the
best this host offers: activities/runtimes/selection.py).

Each kind is a module of activities/runtimes/kinds/ and one factory in `RUNTIMES` (a
`Registry`, polar/registry.py); `check_runtime` checks a spec's kind against it (the worker
before it prepares, `polar submit`, `polar tasks load`), and every list of kinds is derived
from it. A new runtime is its module and one line: `RUNTIMES.register("mine", make_mine)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from activities.runtimes.base import (
    ImageMissing,
    InvalidRuntime,
    InvalidSource,
    PrepareFailed,
    Runtime,
    SourceUnavailable,
)
from activities.runtimes.kinds.local import LocalRuntime
from activities.runtimes.selection import AUTO, concrete
from polar.registry import Registry, UnknownKind
from polar.settings import WorkerSettings
from polar.tasks.runtime_spec import RuntimeSpec

__all__ = [
    "RUNTIMES",
    "ImageMissing",
    "InvalidRuntime",
    "InvalidSource",
    "PrepareFailed",
    "Runtime",
    "RuntimeFactory",
    "RuntimePlace",
    "SourceUnavailable",
    "UnknownRuntime",
    "check_runtime",
    "get_runtime",
]


class UnknownRuntime(UnknownKind):
    """No runtime implements this kind."""


@dataclass(frozen=True)
class RuntimePlace:
    """Where a worker's runtimes live: its `namespace` (its task queue: container names),
    `host_id` and `deployment` (labels its sweep finds), and its `settings` (read from the
    environment where a kind needs them and none are given)."""

    namespace: str | None = None
    host_id: str | None = None
    deployment: str | None = None
    settings: WorkerSettings | None = None


class RuntimeFactory(Protocol):
    """Makes the runtime of one kind, its state under `root`."""

    def __call__(self, root: Path, place: RuntimePlace) -> Runtime: ...


def _local(root: Path, place: RuntimePlace) -> Runtime:
    return LocalRuntime(root, host_id=place.host_id, settings=place.settings)


def _docker(root: Path, place: RuntimePlace) -> Runtime:
    from activities.runtimes.kinds.docker import DockerRuntime  # the docker SDK only when used

    return DockerRuntime(
        root, namespace=place.namespace, host_id=place.host_id, deployment=place.deployment
    )


def _podman(root: Path, place: RuntimePlace) -> Runtime:
    from activities.runtimes.kinds.podman import PodmanRuntime

    return PodmanRuntime(
        root, namespace=place.namespace, host_id=place.host_id, deployment=place.deployment
    )


RUNTIMES: Registry[RuntimeFactory] = Registry(
    "runtime kind", {"local": _local, "docker": _docker, "podman": _podman}, UnknownRuntime
)
"""The runtime factories, by the concrete `RuntimeSpec.kind` they make (polar/registry.py);
`auto` is none of them: `get_runtime` resolves it first."""


def check_runtime(spec: RuntimeSpec) -> None:
    """UnknownRuntime, naming the known kinds, where no runtime serves `spec.kind` (`auto`
    always has one). Run by the worker before it prepares and by the CLI before it submits;
    never in workflow code."""
    if spec.kind == AUTO:
        return
    try:
        RUNTIMES.get(spec.kind)
    except UnknownRuntime as exc:
        message = f"runtime.kind: {exc}, or {AUTO!r} (the best this host offers)"
        raise UnknownRuntime(message, exc.kind, exc.known) from None


def get_runtime(
    kind: str,
    data_dir: Path,
    *,
    namespace: str | None = None,
    host_id: str | None = None,
    deployment: str | None = None,
    settings: WorkerSettings | None = None,
) -> Runtime:
    """The runtime implementation for `kind`; a worker passes its `namespace` (its task
    queue: container names), `host_id`, `deployment` (labels its sweep finds) and its
    `settings` (read from the environment where a kind needs them and none are given). `auto`
    gives the kind this host offers (activities/runtimes/selection.py); a kind with no
    runtime is UnknownRuntime."""
    factory = RUNTIMES.get(concrete(kind))
    place = RuntimePlace(namespace, host_id, deployment, settings)
    return factory(data_dir / "runtimes", place)

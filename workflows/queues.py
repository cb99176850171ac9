"""Task queue names of the stage pools (workflows/stages.py), derived from the workflow queue.

Workflows run on `{queue}`; their activities go to `{queue}-init`,
`{queue}-run` and `{queue}-postrun`, each served by its own worker pool with
its own concurrency cap. Deriving the names keeps workflows deterministic
(no settings read at run time) and lets one deployment run several
independent Polar queues side by side.

A session's runtime lives on one host, so every stage that touches it after
`prepare_runtime` goes to that host's own queues (Temporal's worker-specific
task queue pattern): `{queue}-host-{host_id}` (liveness probe) and
`{queue}-host-{host_id}-init`, `-run`, `-postrun`, one per stage pool so each
pool keeps its cap on every host. `prepare_runtime` (shared init queue) returns
the prefix in its RuntimeHandle (`host_queue`).
"""

from __future__ import annotations

from dataclasses import dataclass

from workflows.stages import POOLS, Pool


@dataclass(frozen=True)
class Queues:
    workflow: str
    init: str
    run: str
    postrun: str

    @classmethod
    def for_workflow_queue(cls, queue: str) -> Queues:
        return cls(queue, **{p.value: f"{queue}-{p.value}" for p in POOLS})

    def of(self, pool: Pool) -> str:
        """The shared queue of `pool`."""
        return str(getattr(self, pool.value))

    def by_pool(self) -> dict[str, str]:
        """Every queue by name: `workflow` and each pool."""
        return {"workflow": self.workflow, **{p.value: self.of(p) for p in POOLS}}


def host_queue_prefix(queue: str, host_id: str) -> str:
    """The queue prefix of host `host_id` for the workflow queue `queue`."""
    return f"{queue}-host-{host_id}"


@dataclass(frozen=True)
class HostQueues:
    """One host's queues: `probe` (is the host alive?) and one per stage pool."""

    probe: str
    init: str
    run: str
    postrun: str

    @classmethod
    def for_prefix(cls, prefix: str) -> HostQueues:
        return cls(prefix, **{p.value: f"{prefix}-{p.value}" for p in POOLS})

    @classmethod
    def for_host(cls, queue: str, host_id: str) -> HostQueues:
        return cls.for_prefix(host_queue_prefix(queue, host_id))

    def of(self, pool: Pool | None) -> str:
        """This host's queue of `pool` (None: its probe queue)."""
        return self.probe if pool is None else str(getattr(self, pool.value))

    def by_pool(self) -> dict[str, str]:
        """This host's queue of each pool."""
        return {p.value: self.of(p) for p in POOLS}

"""Task queue names of the three stage pools, derived from the workflow queue.

Workflows run on `{queue}`; their activities go to `{queue}-init`,
`{queue}-run` and `{queue}-postrun`, each served by its own worker pool with
its own concurrency cap. Deriving the names keeps workflows deterministic
(no settings read at run time) and lets one deployment run several
independent Polar queues side by side.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Queues:
    workflow: str
    init: str
    run: str
    postrun: str

    @classmethod
    def for_workflow_queue(cls, queue: str) -> Queues:
        return cls(queue, f"{queue}-init", f"{queue}-run", f"{queue}-postrun")

    def by_stage(self) -> dict[str, str]:
        return {
            "workflow": self.workflow,
            "init": self.init,
            "run": self.run,
            "postrun": self.postrun,
        }

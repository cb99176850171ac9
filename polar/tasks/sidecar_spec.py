"""A container session's sidecars' readiness: a service's healthcheck, the order the
services start in (`depends_on`), and when the session's own container may start.

As Harbor runs a compose environment (`docker compose up --detach --wait`): the services
start in `depends_on` order, a dependent waiting for each of its dependencies' conditions
(`service_started`, `service_healthy`: its healthcheck passed, `service_completed_successfully`:
it exited 0); the session's container starts once every sidecar is started, every one with a
healthcheck is healthy and every one another service (or the session's container) waits to
complete has exited 0. A sidecar that exits otherwise, gets unhealthy or is not healthy within
its bound (`Healthcheck.bound_s`) fails the session's prepare, naming it (the task's error:
activities/runtimes/kinds/sidecar_readiness.py). A Harbor task's compose file is read into
these by polar/tasks/harbor_compose.py; `Sidecar` itself is in polar/tasks/runtime_spec.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from polar.tasks.strict import StrictModel

if TYPE_CHECKING:
    from polar.tasks.runtime_spec import Sidecar

__all__ = [
    "READY_CAP_S",
    "Condition",
    "Healthcheck",
    "awaited_completions",
    "check_dependencies",
    "start_order",
]

Condition = Literal["service_started", "service_healthy", "service_completed_successfully"]
"""What a dependent waits for (compose's `depends_on.<service>.condition`)."""

READY_CAP_S = 240.0
"""The longest one sidecar is waited for (its healthcheck's own bound, capped): the prepare
stage's default budget is 300 s."""


class Healthcheck(StrictModel):
    """A sidecar's health probe, run in it as the engine runs one (docker's HEALTHCHECK):
    first `interval_s` after it starts, then every `interval_s`; healthy at the first pass,
    unhealthy after `retries` failures in a row (failures in `start_period_s` not counted);
    a probe running past `timeout_s` fails."""

    command: list[str] | str = Field(
        description="an argv run as is (compose's `[CMD, ...]`), or a shell line run by the "
        "image's /bin/sh (`[CMD-SHELL, ...]`, or a string)"
    )
    interval_s: float = Field(default=30.0, ge=0.001, le=READY_CAP_S, allow_inf_nan=False)
    timeout_s: float = Field(default=30.0, ge=0.001, le=3600, allow_inf_nan=False)
    retries: int = Field(default=3, ge=1, le=1000)
    start_period_s: float = Field(default=0.0, ge=0, le=3600, allow_inf_nan=False)

    @field_validator("command")
    @classmethod
    def _some_command(cls, v: list[str] | str) -> list[str] | str:
        if not v or (isinstance(v, str) and not v.strip()):
            raise ValueError("healthcheck: an empty command")
        return v

    def test(self) -> list[str]:
        """The engine's form: `["CMD", *argv]` or `["CMD-SHELL", line]`."""
        if isinstance(self.command, str):
            return ["CMD-SHELL", self.command]
        return ["CMD", *self.command]

    def bound_s(self) -> float:
        """How long it may take to get healthy: its start period, then its retries' probes
        (each at most its timeout) and one more interval, capped at READY_CAP_S."""
        probes = (self.retries + 1) * (self.interval_s + self.timeout_s)
        return min(READY_CAP_S, self.start_period_s + probes + 5.0)


def check_dependencies(sidecars: Iterable[Sidecar], main: Mapping[str, Condition]) -> None:
    """ValueError where a `depends_on` (a sidecar's, or `main`'s: the session's container's)
    names no sidecar of the runtime, itself, or one with no healthcheck for
    `service_healthy`; or where the sidecars' dependencies form a cycle."""
    by_name = {s.name: s for s in sidecars}
    owners: list[tuple[str, Mapping[str, Condition]]] = [
        *((f"sidecar {s.name}", s.depends_on) for s in by_name.values()),
        ("the session's container (main)", main),
    ]
    for owner, deps in owners:
        for name, condition in deps.items():
            if name not in by_name:
                raise ValueError(f"{owner} depends on {name!r}, which is not a sidecar")
            if owner == f"sidecar {name}":
                raise ValueError(f"{owner} depends on itself")
            if condition == "service_healthy" and by_name[name].healthcheck is None:
                raise ValueError(
                    f"{owner} waits for {name!r} to be healthy (service_healthy), but "
                    f"{name!r} has no healthcheck"
                )
    start_order(by_name.values())


def start_order(sidecars: Iterable[Sidecar]) -> list[Sidecar]:
    """The sidecars, each after those it depends on (else in their given order); ValueError
    naming a cycle."""
    by_name = {s.name: s for s in sidecars}
    done: dict[str, Sidecar] = {}
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in done or name not in by_name:
            return
        if name in visiting:
            cycle = [*visiting[visiting.index(name) :], name]
            raise ValueError(f"sidecars depend on each other in a cycle: {' -> '.join(cycle)}")
        visiting.append(name)
        for dep in by_name[name].depends_on:
            visit(dep)
        visiting.pop()
        done[name] = by_name[name]

    for name in by_name:
        visit(name)
    return list(done.values())


def awaited_completions(sidecars: Iterable[Sidecar], main: Mapping[str, Condition]) -> set[str]:
    """The sidecars a service (or the session's container) waits to exit 0: one-shot jobs."""
    deps = [main, *(s.depends_on for s in sidecars)]
    return {n for d in deps for n, c in d.items() if c == "service_completed_successfully"}

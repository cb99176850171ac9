"""A session's sidecars started in `depends_on` order and waited for, as `docker compose up
--detach --wait` does for Harbor (polar/tasks/sidecar_spec.py has the rules).

Each sidecar starts once the sidecars it depends on meet their conditions; the session's own
container is started by the caller once every sidecar is ready: running (or exited 0), healthy
where it has a healthcheck, exited 0 where a service waits for it to complete. A sidecar that
exits otherwise, gets unhealthy, or is not healthy within its healthcheck's bound fails with
`SidecarNotReady` (an InvalidRuntime: the task's environment is broken, not retried), naming the
service, what it did and its last health output (or its last log lines). The wait runs in a
thread of the prepare stage (`in_stoppable_thread`); the stage's heartbeater beats meanwhile. A
cancelled prepare stops it at its next poll or sidecar start and waits for it, so the stage's
cleanup removes everything it started: no sidecar is started after the session's teardown.

Docker runs the healthcheck itself (given at create, `State.Health`). Podman 4.3 takes the same
healthcheck at `run` but runs it on a systemd timer, which a worker without systemd lacks (it
logs "unable to get systemd connection to start healthchecks" and the status stays
`starting`); `podman healthcheck run NAME` runs one probe and keeps podman's own state (the
start period, the failing streak, `unhealthy` after `retries`), so `drives_health` engines get
one probe per interval from here, the first `interval` after the start, as docker's timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from activities.runtimes.base import InvalidRuntime
from polar.tasks.runtime_spec import Sidecar
from polar.tasks.sidecar_spec import (
    READY_CAP_S,
    Condition,
    awaited_completions,
    start_order,
)

__all__ = [
    "ServiceState",
    "SidecarEngine",
    "SidecarNotReady",
    "StartStopped",
    "in_stoppable_thread",
    "start_when_ready",
    "state_of",
]

POLL_S = 0.25

T = TypeVar("T")

_STOP: ContextVar[threading.Event | None] = ContextVar("polar_sidecar_stop", default=None)
"""Set by `in_stoppable_thread` for the thread it runs (threads of asyncio.to_thread run in a
copy of their caller's context)."""


class SidecarNotReady(InvalidRuntime):
    """A sidecar died, got unhealthy, or was not healthy in time: the task's error."""


class StartStopped(Exception):
    """The stage that was starting the sidecars was cancelled: none more is started."""


async def in_stoppable_thread(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a thread; where the caller is cancelled, the sidecar starts and
    readiness polls in that thread stop (`StartStopped`) and the thread is waited for before
    the cancellation goes on, so the caller's cleanup sees all it started."""
    stop = threading.Event()
    token = _STOP.set(stop)
    try:
        work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    finally:
        _STOP.reset(token)
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        stop.set()
        with contextlib.suppress(BaseException):
            await work
        raise


def _stop_point() -> None:
    stop = _STOP.get()
    if stop is not None and stop.is_set():
        raise StartStopped("the prepare stage was cancelled: no further sidecar is started")


@dataclass(frozen=True)
class ServiceState:
    """What the engine says of a started sidecar."""

    status: str
    """`running`, `exited`, `created`, ... (the engine's `State.Status`)"""
    exit_code: int | None
    health: str | None
    """`starting`, `healthy`, `unhealthy`; None: no healthcheck"""
    last_probe: str
    """the last health probe's exit code and output ("" if none yet)"""


def state_of(attrs: Mapping[str, Any]) -> ServiceState:
    """A ServiceState from a container's inspect data (docker's and podman's agree)."""
    state = attrs.get("State") or {}
    health = state.get("Health") or state.get("Healthcheck") or {}
    log = health.get("Log") or []
    last = ""
    if log:
        entry = log[-1]
        last = f"exit {entry.get('ExitCode')}: {str(entry.get('Output') or '').strip()[-400:]!r}"
    status = str(state.get("Status") or "")
    return ServiceState(
        status=status,
        exit_code=None if status == "running" else state.get("ExitCode"),
        health=(health.get("Status") or None) if health else None,
        last_probe=last,
    )


class SidecarEngine(Protocol):
    drives_health: bool
    """True: the engine runs no periodic healthcheck, `probe` runs one (podman)."""

    def start(self, sidecar: Sidecar) -> None: ...

    def state(self, sidecar: Sidecar) -> ServiceState: ...

    def probe(self, sidecar: Sidecar) -> None: ...

    def logs(self, sidecar: Sidecar) -> str: ...


def start_when_ready(
    engine: SidecarEngine,
    sidecars: list[Sidecar],
    main_depends_on: Mapping[str, Condition],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Every sidecar started in order, each once its dependencies meet their conditions,
    then waited for until all are ready for the session's container; SidecarNotReady."""
    waiter = _Waiter(engine, clock, sleep)
    by_name = {s.name: s for s in sidecars}
    for sidecar in start_order(sidecars):
        for name, needed in sidecar.depends_on.items():
            waiter.wait(by_name[name], needed, f"sidecar {sidecar.name}")
        _stop_point()
        engine.start(sidecar)
        waiter.started[sidecar.name] = clock()
    completions = awaited_completions(sidecars, main_depends_on)
    for sidecar in start_order(sidecars):
        condition: Condition = (
            "service_completed_successfully"
            if sidecar.name in completions
            else "service_healthy"
            if sidecar.healthcheck is not None
            else "service_started"
        )
        waiter.wait(sidecar, condition, "the session's container")


class _Waiter:
    def __init__(
        self, engine: SidecarEngine, clock: Callable[[], float], sleep: Callable[[float], None]
    ) -> None:
        self.engine, self.clock, self.sleep = engine, clock, sleep
        self.started: dict[str, float] = {}
        self.probes: dict[str, int] = {}
        """the probes run so far, for an engine that `drives_health`"""

    def wait(self, sidecar: Sidecar, condition: Condition, waiter: str) -> None:
        check = sidecar.healthcheck
        started = self.started[sidecar.name]
        bound = check.bound_s() if condition == "service_healthy" and check else READY_CAP_S
        while True:
            _stop_point()
            state = self.engine.state(sidecar)
            if self._met(sidecar, condition, state, waiter):
                return
            if self.clock() - started > bound:
                self._fail(sidecar, state, waiter, f"not {_WANTED[condition]} after {bound:.0f} s")
            if check is not None and self.engine.drives_health:
                due = started + check.interval_s * (self.probes.get(sidecar.name, 0) + 1)
                if self.clock() >= due:
                    self.probes[sidecar.name] = self.probes.get(sidecar.name, 0) + 1
                    self.engine.probe(sidecar)
                    continue
            self.sleep(POLL_S)

    def _met(self, sidecar: Sidecar, condition: Condition, state: ServiceState, by: str) -> bool:
        exited = state.status in ("exited", "stopped", "dead")
        if condition == "service_completed_successfully":
            if exited and state.exit_code not in (0, None):
                self._fail(sidecar, state, by, f"exited with code {state.exit_code}")
            return exited
        if exited and (state.exit_code != 0 or condition == "service_healthy"):
            self._fail(sidecar, state, by, f"exited with code {state.exit_code}")
        if condition == "service_started":
            return state.status == "running" or exited
        if state.health == "unhealthy":
            self._fail(sidecar, state, by, "is unhealthy")
        return state.health == "healthy"

    def _fail(self, sidecar: Sidecar, state: ServiceState, waiter: str, what: str) -> None:
        details = [f"last health check: {state.last_probe}"] if state.last_probe else []
        if not state.last_probe or state.last_probe.endswith("''") or state.exit_code is not None:
            logs = self.engine.logs(sidecar).strip()
            details.append(f"its last output: {logs[-400:]!r}" if logs else "no output")
        detail = "; ".join(details)
        raise SidecarNotReady(f"sidecar {sidecar.name} {what} ({waiter} waits for it); {detail}")


_WANTED: dict[str, str] = {
    "service_started": "running",
    "service_healthy": "healthy",
    "service_completed_successfully": "completed",
}

"""The readiness wait (activities/runtimes/kinds/sidecar_readiness.py) on a scripted engine and
clock: dependents start only once their dependencies meet their conditions; an engine that
`drives_health` gets one probe per interval; a sidecar that exits, gets unhealthy or is not
healthy within its bound fails naming it and its last health output. The real engines:
tests/system/test_harbor_compose_ready.py."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import pytest

from activities.runtimes.kinds.sidecar_readiness import (
    ServiceState,
    SidecarNotReady,
    in_stoppable_thread,
    start_when_ready,
    state_of,
)
from polar.tasks.runtime_spec import Sidecar
from polar.tasks.sidecar_spec import Healthcheck

CHECK = Healthcheck(command=["probe"], interval_s=1, timeout_s=1, retries=2)


@dataclass
class Engine:
    """Each sidecar's states, by seconds since its start (the last one at or before now)."""

    script: dict[str, list[tuple[float, ServiceState]]]
    drives_health: bool = False
    now: float = 0.0
    started: dict[str, float] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def start(self, sidecar: Sidecar) -> None:
        self.started[sidecar.name] = self.now
        self.events.append(f"start {sidecar.name} at {self.now:.2f}")

    def state(self, sidecar: Sidecar) -> ServiceState:
        age = self.now - self.started[sidecar.name]
        return [s for at, s in self.script[sidecar.name] if at <= age][-1]

    def probe(self, sidecar: Sidecar) -> None:
        self.events.append(f"probe {sidecar.name}")

    def logs(self, sidecar: Sidecar) -> str:
        return "listening soon"


def _state(
    status: str = "running", health: str | None = None, code: int | None = None
) -> ServiceState:
    return ServiceState(status, code, health, "exit 1: 'refused'" if health else "")


RUNNING = [(0.0, _state())]


def _healthy_at(seconds: float) -> list[tuple[float, ServiceState]]:
    return [(0.0, _state(health="starting")), (seconds, _state(health="healthy"))]


def test_a_dependent_starts_once_its_dependency_is_healthy() -> None:
    db = Sidecar(name="db", image="i", healthcheck=CHECK)
    web = Sidecar(name="web", image="i", depends_on={"db": "service_healthy"})
    engine = Engine({"db": _healthy_at(3.0), "web": RUNNING})
    start_when_ready(engine, [web, db], {}, clock=engine.clock, sleep=engine.sleep)
    assert engine.events == ["start db at 0.00", "start web at 3.00"]


def test_a_one_shot_job_runs_to_its_end_first() -> None:
    init = Sidecar(name="init", image="i")
    app = Sidecar(name="app", image="i", depends_on={"init": "service_completed_successfully"})
    engine = Engine({"init": [(0.0, _state()), (2.0, _state("exited", code=0))], "app": RUNNING})
    start_when_ready(engine, [app, init], {}, clock=engine.clock, sleep=engine.sleep)
    assert engine.events == ["start init at 0.00", "start app at 2.00"]


def test_an_engine_without_a_timer_is_probed_once_per_interval() -> None:
    db = Sidecar(name="db", image="i", healthcheck=CHECK)
    engine = Engine({"db": _healthy_at(3.1)}, drives_health=True)
    start_when_ready(engine, [db], {}, clock=engine.clock, sleep=engine.sleep)
    assert engine.events == ["start db at 0.00", *["probe db"] * 3]  # at 1, 2 and 3 s


@pytest.mark.parametrize(
    ("script", "main", "said"),
    [
        ([(0.0, _state(health="starting")), (2.0, _state(health="unhealthy"))], {}, "is unhealthy"),
        ([(0.0, _state(health="starting"))], {}, "not healthy after 11 s"),
        ([(0.0, _state("exited", code=3))], {}, "exited with code 3"),
        ([(0.0, _state("exited", "starting", code=0))], {}, "exited with code 0"),
    ],
)
def test_what_is_not_ready_fails_naming_it(
    script: list[tuple[float, ServiceState]], main: dict[str, str], said: str
) -> None:
    db = Sidecar(name="db", image="i", healthcheck=CHECK)
    engine = Engine({"db": script})
    with pytest.raises(SidecarNotReady) as err:
        start_when_ready(engine, [db], {}, clock=engine.clock, sleep=engine.sleep)
    assert str(err.value).startswith(f"sidecar db {said} (the session's container waits")
    detail = "its last output: 'listening soon'" if script[0][1].health is None else "exit 1:"
    assert detail in str(err.value)


def test_a_job_main_waits_for_must_exit_0_and_its_output_is_told() -> None:
    job = Sidecar(name="job", image="i")
    engine = Engine({"job": [(0.0, _state()), (1.0, _state("exited", code=2))]})
    with pytest.raises(SidecarNotReady, match="sidecar job exited with code 2 .*listening soon"):
        start_when_ready(
            engine,
            [job],
            {"job": "service_completed_successfully"},
            clock=engine.clock,
            sleep=engine.sleep,
        )
    done = Engine({"job": [(0.0, _state("exited", code=0))]})  # a server need not be running
    start_when_ready(done, [job], {}, clock=done.clock, sleep=done.sleep)


def test_docker_and_podman_inspect_data_are_read_alike() -> None:
    log = [{"ExitCode": 1, "Output": "no\n"}, {"ExitCode": 0, "Output": "up\n"}]
    docker = {
        "State": {"Status": "running", "ExitCode": 0, "Health": {"Status": "healthy", "Log": log}}
    }
    podman = {
        "State": {
            "Status": "running",
            "ExitCode": 0,
            "Healthcheck": {"Status": "healthy", "Log": log},
        }
    }
    assert (
        state_of(docker)
        == state_of(podman)
        == ServiceState("running", None, "healthy", "exit 0: 'up'")
    )
    assert state_of({"State": {"Status": "exited", "ExitCode": 4}}) == ServiceState(
        "exited", 4, None, ""
    )


async def test_a_cancelled_prepare_starts_no_further_sidecar_and_waits_for_its_thread() -> None:
    """Cancelled while waiting for `db` to be healthy (it never is): the thread stops at its
    next poll, `web` is never started, and the cancellation goes on only once the thread has
    ended (so the stage's cleanup sees every container it made)."""
    db = Sidecar(name="db", image="i", healthcheck=CHECK.model_copy(update={"retries": 99}))
    web = Sidecar(name="web", image="i", depends_on={"db": "service_healthy"})
    engine = Engine({"db": [(0.0, _state(health="starting"))], "web": RUNNING})
    ended = threading.Event()

    def start() -> None:
        try:  # real time: the stop is seen at the next poll
            start_when_ready(engine, [web, db], {}, clock=time.monotonic, sleep=time.sleep)
        finally:
            ended.set()

    task = asyncio.ensure_future(in_stoppable_thread(start))
    await asyncio.sleep(0.6)
    assert engine.events == [engine.events[0]] and engine.events[0].startswith("start db")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended.is_set()  # the thread had ended when the cancellation went on
    await asyncio.sleep(0.6)
    assert [e for e in engine.events if e.startswith("start")] == [engine.events[0]]

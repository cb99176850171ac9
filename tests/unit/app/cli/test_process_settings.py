"""`polar gateway` and `polar worker` read only their own settings section: a bad value of
the other process's variable stops neither."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.cli import services
from polar.settings import GatewaySettings, PolarSettings, WorkerSettings, get_settings


@pytest.fixture(autouse=True)
def fresh_settings() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_the_gateway_starts_past_a_bad_worker_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    import proxy.server

    monkeypatch.setenv("POLAR_MAX_RUN", "many")
    served: list[PolarSettings] = []
    monkeypatch.setattr(proxy.server, "serve", served.append)
    services.gateway()
    assert [type(s) for s in served] == [GatewaySettings]


def test_the_worker_starts_past_a_bad_gateway_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    import activities.worker

    monkeypatch.setenv("POLAR_UPSTREAM_ROUTING", "random")
    ran: list[PolarSettings] = []

    async def run_worker(settings: PolarSettings, stages: tuple[str, ...]) -> None:
        ran.append(settings)

    monkeypatch.setattr(activities.worker, "run_worker", run_worker)
    services.worker(queues="run", max_init=None, max_run=3, max_postrun=None)
    assert [type(s) for s in ran] == [WorkerSettings]
    assert isinstance(ran[0], WorkerSettings) and ran[0].max_run == 3

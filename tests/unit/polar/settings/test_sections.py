"""Settings by process: each process validates only its own section, with the same
`POLAR_*` names as the whole `Settings`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from polar.settings import (
    SECTIONS,
    ClientSettings,
    GatewaySettings,
    Settings,
    WorkerSettings,
    get_settings,
)


def test_a_bad_worker_value_stops_a_worker_never_a_gateway(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POLAR_MAX_RUN", "many")
    assert GatewaySettings().gateway_port == 8400
    with pytest.raises(ValidationError, match="max_run"):
        WorkerSettings()
    with pytest.raises(ValidationError, match="max_run"):
        Settings()


def test_a_bad_gateway_value_stops_a_gateway_never_a_worker_or_a_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POLAR_UPSTREAM_ROUTING", "random")
    assert WorkerSettings().max_run == 8
    assert ClientSettings().temporal_address
    with pytest.raises(ValidationError, match="upstream_routing"):
        GatewaySettings()


def test_sections_read_the_same_variables_as_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLAR_S3_BUCKET", "elsewhere")
    monkeypatch.setenv("POLAR_TEMPORAL_ADDRESS", "temporal.example:7233")
    whole = Settings().as_env()
    for section in (WorkerSettings, GatewaySettings, ClientSettings):
        env = section().as_env()
        assert env.items() <= whole.items(), section.__name__
        assert env["POLAR_S3_BUCKET"] == "elsewhere"
    assert WorkerSettings().temporal_address == "temporal.example:7233"
    assert "POLAR_TEMPORAL_ADDRESS" not in GatewaySettings().as_env()  # never Temporal's
    assert "POLAR_MAX_RUN" not in GatewaySettings().as_env()
    assert "POLAR_UPSTREAM_URLS" not in WorkerSettings().as_env()


def test_every_setting_is_defined_in_one_section() -> None:
    owners: dict[str, str] = {}
    for section in SECTIONS:
        for name in vars(section)["__annotations__"]:
            assert name not in owners, f"{name}: {owners[name]} and {section.__name__}"
            owners[name] = section.__name__
    assert sorted(owners) == sorted(Settings.model_fields)


def test_get_settings_reads_a_section_once() -> None:
    get_settings.cache_clear()
    try:
        worker = get_settings(WorkerSettings)
        assert type(worker) is WorkerSettings and get_settings(WorkerSettings) is worker
        assert type(get_settings()) is Settings
    finally:
        get_settings.cache_clear()

"""Polar's configuration, read from `POLAR_*` environment variables (and flags of the CLI), in
sections by process.

Each process reads and validates only its own section: the gateway `GatewaySettings`, the
worker `WorkerSettings`, a trainer's client `ClientSettings`; `Settings` holds every
section (the dev stack, the CLI, tests). The environment variable names are the same in
every section. The embedded dev stack and production use the same settings: production
points `temporal_address`, `s3_endpoint` and `upstream_urls` at a Temporal cluster, AWS S3
and a vLLM/SGLang fleet.
"""

from __future__ import annotations

from functools import cache
from typing import TypeVar, overload

from polar.settings.base import PolarSettings, checkout_path, default_data_dir
from polar.settings.client import ClientSettings
from polar.settings.console import ConsoleSettings
from polar.settings.devstack import DevStackSettings
from polar.settings.gateway import GatewaySettings
from polar.settings.service import ServiceSettings
from polar.settings.storage import StorageSettings
from polar.settings.temporal import TemporalSettings
from polar.settings.worker import WorkerSettings

__all__ = [
    "SECTIONS",
    "ClientSettings",
    "ConsoleSettings",
    "DevStackSettings",
    "GatewaySettings",
    "PolarSettings",
    "ServiceSettings",
    "Settings",
    "StorageSettings",
    "TemporalSettings",
    "WorkerSettings",
    "checkout_path",
    "default_data_dir",
    "get_settings",
]


class Settings(WorkerSettings, GatewaySettings, ConsoleSettings, DevStackSettings):
    """Every knob of Polar, every section at once: the dev stack, the CLI and tests."""


SECTIONS: tuple[type[PolarSettings], ...] = (
    PolarSettings,
    TemporalSettings,
    StorageSettings,
    ServiceSettings,
    GatewaySettings,
    WorkerSettings,
    ClientSettings,
    ConsoleSettings,
    DevStackSettings,
)
"""The sections, each defining its own fields (docs/configuration.md lists them by section)."""


SectionT = TypeVar("SectionT", bound=PolarSettings)


@cache
def _read(section: type[PolarSettings]) -> PolarSettings:
    from polar.credentials import with_dev_secrets

    return with_dev_secrets(section())


class _ProcessSettings:
    """`get_settings`: the process-wide settings of a section, read once from the
    environment."""

    @overload
    def __call__(self) -> Settings: ...
    @overload
    def __call__(self, section: type[SectionT]) -> SectionT: ...
    def __call__(self, section: type[PolarSettings] = Settings) -> PolarSettings:
        """The settings of `section` (default: every section), read once from the
        environment; secrets it leaves unset come from the data dir's dev stack, if one
        generated them (polar.credentials). A process validates only its own section: the
        gateway `get_settings(GatewaySettings)`, the worker `get_settings(WorkerSettings)`."""
        return _read(section)

    def cache_clear(self) -> None:
        """Read the environment again at the next call (the CLI's flags change it)."""
        _read.cache_clear()


get_settings = _ProcessSettings()

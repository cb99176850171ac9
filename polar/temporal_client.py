"""Connecting to Temporal with the pydantic data converter every Polar process uses."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime

from polar.settings import TemporalSettings


async def connect(settings: TemporalSettings, runtime: Runtime | None = None) -> Client:
    """A client for `settings.temporal_address`, converting payloads with pydantic.

    `runtime`: a Temporal core runtime with telemetry (worker metrics); default the SDK's.
    """
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
        runtime=runtime,
    )

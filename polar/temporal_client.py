"""Connecting to Temporal with the pydantic data converter every Polar process uses."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from polar.settings import Settings


async def connect(settings: Settings) -> Client:
    """A client for `settings.temporal_address`, converting payloads with pydantic."""
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
    )

"""Where Temporal is: the worker, the SDK and the CLI read it; the gateway never does."""

from __future__ import annotations

from pydantic import Field

from polar.settings.base import PolarSettings


class TemporalSettings(PolarSettings):
    """The Temporal frontend, namespace and workflow queue."""

    temporal_address: str = Field(default="127.0.0.1:7233", description="Temporal frontend")
    temporal_namespace: str = Field(default="default", description="Temporal namespace")
    temporal_ui_port: int = Field(default=8233, description="Web UI port of the dev server")
    task_queue: str = Field(
        default="polar", description="workflow queue; stages use {queue}-init/-run/-postrun"
    )

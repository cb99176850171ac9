"""What a trainer's client and the CLI read besides Temporal and S3: how tasks are loaded."""

from __future__ import annotations

from pydantic import Field

from polar.settings.storage import StorageSettings
from polar.settings.temporal import TemporalSettings


class ClientSettings(TemporalSettings, StorageSettings):
    """The SDK's and the CLI's settings: Temporal, S3, and Harbor's image map for loading
    tasks."""

    harbor_image_map: dict[str, str] = Field(
        default_factory=dict,
        description="Harbor tasks: image names (Dockerfile FROM, docker_image) -> local images, "
        "as a JSON object; a task's own [metadata.polar.image_map] wins (docs/harbor.md)",
    )

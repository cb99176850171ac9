"""What a trainer's client and the CLI read besides Temporal and S3: how tasks are loaded."""

from __future__ import annotations

from pydantic import Field

from polar.settings.storage import StorageSettings
from polar.settings.temporal import TemporalSettings


class ClientSettings(TemporalSettings, StorageSettings):
    """The SDK's and the CLI's settings: Temporal, S3, Harbor's image map, the console's URL."""

    harbor_image_map: dict[str, str] = Field(
        default_factory=dict,
        description="Harbor tasks: image names (Dockerfile FROM, docker_image) -> local images, "
        "as a JSON object; a task's own [metadata.polar.image_map] wins (docs/harbor.md)",
    )
    console_public_url: str | None = Field(
        default=None,
        description="URL the console is reached at: links printed by the CLI and, when set, "
        "a link from each submitted task's and session's summary in the Temporal Web UI "
        "(docs/console.md); the console's own default is its host and port",
    )

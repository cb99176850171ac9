"""What only the console reads besides Temporal and S3: where it listens and what it links to."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from polar.settings.client import ClientSettings


class ConsoleSettings(ClientSettings):
    """The console's listener, the Web UI it links to and its tokenizer.

    Its public URL (`console_public_url`) is a client setting: submissions link to it."""

    console_host: str = Field(default="127.0.0.1", description="where the console listens")
    console_port: int = Field(default=8410, description="the console's port")
    console_temporal_ui_url: str | None = Field(
        default=None,
        description="base URL of the Temporal Web UI the console links workflows to; default: "
        "the dev server's (temporal_address's host, temporal_ui_port)",
    )
    console_gateways: str | None = Field(
        default=None,
        description="admin URLs of the gateways the topology page reads (/health, /metrics), "
        "comma-separated; unset: the gateway's own settings (POLAR_ADMIN_HOST, POLAR_ADMIN_PORT)",
    )
    console_tokenizer_dir: Path | None = Field(
        default=None,
        description="tokenizer (HF model dir) the trace pages decode tokens with; unset: "
        "model_dir's where set, else token ids are shown",
    )

    @property
    def console_base_url(self) -> str:
        """Where the console answers (its public URL, else its listener)."""
        if self.console_public_url:
            return self.console_public_url.rstrip("/")
        host = "127.0.0.1" if self.console_host in ("0.0.0.0", "::") else self.console_host
        return f"http://{host}:{self.console_port}"

    @property
    def temporal_ui_base_url(self) -> str:
        """The Web UI's base URL (no trailing slash)."""
        if self.console_temporal_ui_url:
            return self.console_temporal_ui_url.rstrip("/")
        host = self.temporal_address.rsplit(":", 1)[0]
        return f"http://{host}:{self.temporal_ui_port}"

"""What the gateway and the worker share: the gateway's addresses (the worker tells harnesses
where it is) and the secrets between them (the worker mints session keys the gateway checks)."""

from __future__ import annotations

from pydantic import Field

from polar.settings.storage import StorageSettings


class ServiceSettings(StorageSettings):
    """The gateway's listeners and URL, the session secret and the admin token."""

    gateway_host: str = Field(default="127.0.0.1", description="where the gateway listens")
    gateway_port: int = Field(default=8400, description="the gateway's model port")
    gateway_url: str | None = Field(
        default=None, description="URL harnesses reach the gateway at; default from host/port"
    )
    session_secret: str | None = Field(
        default=None,
        description="HMAC secret shared by workers (which mint session keys) and gateways; "
        "required (the dev stack generates one per data dir, polar.credentials)",
    )
    admin_host: str = Field(
        default="127.0.0.1", description="the gateway's admin listener (never the model port)"
    )
    admin_port: int = Field(
        default=8401,
        description="admin, metrics, health and docs of the gateway (POLAR_ADMIN_PORT)",
    )
    admin_token: str | None = Field(
        default=None,
        description="bearer token of the gateway's /admin endpoints; unset: they answer 403",
    )

    @property
    def gateway_base_url(self) -> str:
        return self.gateway_url or f"http://{self.gateway_host}:{self.gateway_port}"

    @property
    def admin_base_url(self) -> str:
        """Where the gateway's admin listener answers (/admin, /metrics, /health, /docs)."""
        host = "127.0.0.1" if self.admin_host in ("0.0.0.0", "::") else self.admin_host
        return f"http://{host}:{self.admin_port}"

"""An MCP server the harness is given (`harness.mcp_servers`), as Harbor's `MCPServerConfig`.

`stdio`: a command the harness spawns inside the session's sandbox and talks to over its
stdin and stdout: reachable only from that session, its traffic stays in the sealed box.
`sse` and `streamable-http` (`http` is read as `streamable-http`, as in Harbor): a server
the harness reaches at `url`, with `headers` on every request. Such a server is a service
beside the session (a Harbor compose sidecar, on the session's own private network) or,
where the task's network allows egress, a remote one (the Harbor loader refuses any other:
polar/tasks/harbor_harness.py). The harness's model calls still go only through the gateway.

`headers` are kept as written: a value may hold `${VAR}` / `${VAR:-default}` templates,
resolved from the harness's `env` when the harness starts (never from the worker's own
environment); a credential header (Authorization, a cookie, a name with KEY, TOKEN,
SECRET...) must take its value from such a reference, never hold it literally, as Harbor
demands. Each harness adapter writes the servers into the harness's own MCP configuration
(activities/harnesses/: its `mcp_config`), the header values through its environment; a
harness that cannot speak a transport refuses it before the session runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from polar.tasks.strict import StrictModel

__all__ = [
    "MCP_NAME",
    "URL_TRANSPORTS",
    "McpServerSpec",
    "header_variables",
    "resolve_header",
    "unset_header_variables",
]

MCP_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
"""A server's name: a TOML bare key and a tool-name prefix (`mcp__<name>__<tool>`) in every
harness's config."""
URL_TRANSPORTS = ("sse", "streamable-http")

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SENSITIVE = re.compile(r"(KEY|SECRET|TOKEN(?!S)|PASSWORD|CREDENTIAL|AUTH)", re.IGNORECASE)
_NO_DEFAULT = r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-)?\}"
_TEMPLATED_CREDENTIAL = re.compile(
    rf"\s*(?:[A-Za-z]+\s+)?{_NO_DEFAULT}(?:[\s:-]*{_NO_DEFAULT})*\s*"
)


def header_variables(value: str) -> list[tuple[str, str | None]]:
    """(variable, default or None) of each `${VAR}` template in a header value."""
    return [(m[1], m[2]) for m in _TEMPLATE.finditer(value)]


def resolve_header(value: str, env: Mapping[str, str]) -> str:
    """`value` with its templates resolved from `env` (KeyError naming an unset one)."""

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise KeyError(name)

    return _TEMPLATE.sub(substitute, value)


def _literal_credential(name: str, value: str) -> bool:
    """Whether a header holds a credential outside `${VAR}` references (Harbor's rule)."""
    sensitive = bool(_SENSITIVE.search(name)) or name.lower() in ("cookie", "set-cookie")
    if any(
        default and (sensitive or _SENSITIVE.search(var))
        for var, default in header_variables(value)
    ):
        return True
    return sensitive and bool(value.strip()) and not _TEMPLATED_CREDENTIAL.fullmatch(value)


class McpServerSpec(StrictModel):
    """One MCP server: `command` with `args` spawned over stdio, or `url` (with `headers`)
    reached over SSE or streamable HTTP."""

    name: str = Field(pattern=MCP_NAME, description="the server's name (letters, digits, _ -)")
    transport: Literal["stdio", "sse", "streamable-http"] = Field(
        default="stdio",
        description="`stdio`: the harness spawns `command` in the sandbox; `sse` or "
        "`streamable-http` (`http`): the harness reaches `url` (a service beside the session)",
    )
    url: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="(sse, streamable-http) the server's http(s) URL",
    )
    command: str | None = Field(
        default=None, min_length=1, description="(stdio) the program, as the sandbox finds it"
    )
    args: list[str] = Field(default_factory=list, description="(stdio) its arguments")
    headers: dict[str, str] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,
        description="(sse, streamable-http) HTTP headers on every request; `${VAR}` in a "
        "value is resolved from the harness's env",
    )

    @field_validator("transport", mode="before")
    @classmethod
    def _http_is_streamable(cls, value: Any) -> Any:
        return "streamable-http" if value == "http" else value

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL with a host")
        if any(c.isspace() for c in url):
            raise ValueError(f"{url!r} holds white space")
        return url

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"invalid HTTP header name {name!r}")
            if "\r" in value or "\n" in value:
                raise ValueError(f"header {name!r} must not hold a newline")
            if "${" in _TEMPLATE.sub(" ", value):
                raise ValueError(f"header {name!r}: invalid ${{VAR}} template")
            if _literal_credential(name, value):
                raise ValueError(
                    f"header {name!r} must take its credential from a ${{VAR}} reference "
                    "without a default, such as 'Bearer ${TOKEN}'"
                )
        return headers

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServerSpec:
        if self.transport in URL_TRANSPORTS and not self.url:
            raise ValueError(f"'url' is required for transport {self.transport!r}")
        if self.transport == "stdio" and not self.command:
            raise ValueError("'command' is required for transport 'stdio'")
        if self.transport == "stdio" and self.headers:
            raise ValueError("'headers' is only for the HTTP transports")
        return self

    @property
    def host(self) -> str | None:
        """The URL's host (lower case), None for stdio."""
        return urlsplit(self.url).hostname if self.url else None


def unset_header_variables(servers: list[McpServerSpec], env: Mapping[str, str]) -> list[str]:
    """`name.headers.Header: ${VAR}` for each template without a default that `env` lacks."""
    return [
        f"{server.name}.headers.{header}: ${{{var}}}"
        for server in servers
        for header, value in server.headers.items()
        for var, default in header_variables(value)
        if default is None and var not in env
    ]

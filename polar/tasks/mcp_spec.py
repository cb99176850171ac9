"""An MCP server the harness is given (`harness.mcp_servers`): run by the harness itself.

A `stdio` server is a command the harness spawns inside the session's sandbox and
talks to over its stdin and stdout (the Model Context Protocol's stdio transport):
it is reachable only from that session, its traffic stays in the sealed box, and the
harness's model calls still go only through the gateway. Each harness adapter writes
the servers into the harness's own MCP configuration (activities/harnesses/: its
`mcp_config`). URL transports (`sse`, `streamable-http`) are not taken: they name a
service outside the harness's sandbox (a Harbor compose sidecar, or a remote one), which
Polar does not write into a harness's config yet.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from polar.tasks.strict import StrictModel

__all__ = ["MCP_NAME", "McpServerSpec"]

MCP_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
"""A server's name: a TOML bare key and a tool-name prefix (`mcp__<name>__<tool>`) in every
harness's config."""


class McpServerSpec(StrictModel):
    """One MCP server the harness starts: `command` with `args`, spoken to over stdio."""

    name: str = Field(pattern=MCP_NAME, description="the server's name (letters, digits, _ -)")
    transport: Literal["stdio"] = Field(
        default="stdio",
        description="only `stdio`: the harness spawns it in the sandbox (URL transports name "
        "services outside the session, which Polar does not run)",
    )
    command: str = Field(min_length=1, description="the program, as the sandbox finds it")
    args: list[str] = Field(default_factory=list, description="its arguments")

"""A task's MCP servers in each harness's own MCP configuration (`CliAdapter.mcp_config`).

Every server is `stdio` (polar/tasks/mcp_spec.py): the harness spawns its command
inside the session's sandbox and speaks MCP over its stdin and stdout, so the server
is reachable only from that session and its traffic never leaves the sealed box;
the harness's model calls still go only through the gateway. The shapes, as Harbor's
installed agents write them: Claude Code's `mcpServers` JSON (here a file given with
`--mcp-config`, `--strict-mcp-config` so no other server is loaded), Codex's
`[mcp_servers.<name>]` tables in its config.toml, Qwen Code's `mcpServers` in its
settings.json. `command` gets the Claude-shaped file's path in $POLAR_MCP_CONFIG.
"""

from __future__ import annotations

import json
from typing import Any

from polar.tasks.mcp_spec import McpServerSpec

MCP_ENV = "POLAR_MCP_CONFIG"
"""Where a `command` harness finds the task's MCP servers (`{"mcpServers": {...}}` JSON)."""
MCP_FILE = ".polar-mcp.json"
"""That file, and Claude Code's `--mcp-config`, relative to HOME."""


def mcp_servers_json(servers: list[McpServerSpec], *, typed: bool = True) -> dict[str, Any]:
    """`{"mcpServers": {name: {"type": "stdio", "command", "args"}}}` (`typed` False: without
    `type`, as Qwen Code writes it)."""
    out: dict[str, Any] = {}
    for server in servers:
        entry: dict[str, Any] = {"type": "stdio"} if typed else {}
        out[server.name] = entry | {"command": server.command, "args": list(server.args)}
    return {"mcpServers": out}


def mcp_json_text(servers: list[McpServerSpec]) -> str:
    return json.dumps(mcp_servers_json(servers), indent=2)


def codex_tables(servers: list[McpServerSpec]) -> str:
    """Codex's `[mcp_servers.<name>]` tables (TOML; a JSON string is a TOML string)."""
    tables = []
    for server in servers:
        args = ", ".join(json.dumps(a) for a in server.args)
        tables.append(
            f"\n[mcp_servers.{server.name}]\ncommand = {json.dumps(server.command)}\n"
            f"args = [{args}]\n"
        )
    return "".join(tables)

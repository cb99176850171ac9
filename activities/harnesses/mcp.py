"""A task's MCP servers in each harness's own MCP configuration (`CliAdapter.mcp_config`).

A `stdio` server (polar/tasks/mcp_spec.py) is spawned by the harness inside the session's
sandbox and spoken to over its stdin and stdout, so it is reachable only from that session
and its traffic never leaves the sealed box. An `sse` or `streamable-http` server is
reached at its URL: a service beside the session (a compose sidecar, on the session's own
private network) or one the task's egress allows. The harness's model calls still go only
through the gateway. The shapes, as Harbor's installed agents write them: Claude Code's
`mcpServers` JSON (`type` stdio, `sse` or `http`; here a file given with `--mcp-config`,
`--strict-mcp-config` so no other server is loaded), Codex's `[mcp_servers.<name>]`
tables in its config.toml (`command`/`args`, or `url`: Codex speaks streamable HTTP only,
and its config model refuses `sse`), Qwen Code's `mcpServers` in its settings.json
(`httpUrl` for streamable HTTP, `url` for SSE). `command` gets the Claude-shaped file's path
in $POLAR_MCP_CONFIG.

Headers: each value, its `${VAR}` resolved from the harness's env (never the worker's), is
put in the harness's environment as `POLAR_MCP_HEADER_<server>_<header>`, and the config
names that variable (`${...}` in Claude Code's and Qwen Code's, `env_http_headers` in
Codex's), as Harbor does: the config files hold no credential.
"""

from __future__ import annotations

import json
from typing import Any

from polar.tasks.mcp_spec import McpServerSpec, resolve_header

MCP_ENV = "POLAR_MCP_CONFIG"
"""Where a `command` harness finds the task's MCP servers (`{"mcpServers": {...}}` JSON)."""
MCP_FILE = ".polar-mcp.json"
"""That file, and Claude Code's `--mcp-config`, relative to HOME."""
HEADER_ENV = "POLAR_MCP_HEADER"
"""The prefix of the variables that hold the servers' header values."""


def header_refs(servers: list[McpServerSpec]) -> dict[str, dict[str, str]]:
    """Server name → header → the variable holding its value."""
    return {
        server.name: {h: f"{HEADER_ENV}_{i}_{j}" for j, h in enumerate(server.headers)}
        for i, server in enumerate(servers)
        if server.headers
    }


def header_env(servers: list[McpServerSpec], env: dict[str, str]) -> dict[str, str]:
    """The header variables (`header_refs`) with their values resolved from `env`, the
    harness's env (HarnessSpec checks every variable without a default is there)."""
    refs = header_refs(servers)
    return {
        refs[server.name][header]: resolve_header(value, env)
        for server in servers
        for header, value in server.headers.items()
    }


def mcp_servers_json(servers: list[McpServerSpec], *, qwen: bool = False) -> dict[str, Any]:
    """`{"mcpServers": {name: entry}}`: Claude Code's entries (`type`: stdio, sse, http),
    or with `qwen` Qwen Code's (no `type`; `httpUrl` for streamable HTTP, `url` for SSE)."""
    refs = header_refs(servers)
    out: dict[str, Any] = {}
    for server in servers:
        entry: dict[str, Any]
        if server.transport == "stdio":
            entry = {} if qwen else {"type": "stdio"}
            entry |= {"command": server.command, "args": list(server.args)}
        elif qwen:
            key = "httpUrl" if server.transport == "streamable-http" else "url"
            entry = {key: server.url}
        else:
            kind = "http" if server.transport == "streamable-http" else "sse"
            entry = {"type": kind, "url": server.url}
        if server.name in refs:
            entry["headers"] = {h: f"${{{var}}}" for h, var in refs[server.name].items()}
        out[server.name] = entry
    return {"mcpServers": out}


def mcp_json_text(servers: list[McpServerSpec]) -> str:
    return json.dumps(mcp_servers_json(servers), indent=2)


def codex_tables(servers: list[McpServerSpec]) -> str:
    """Codex's `[mcp_servers.<name>]` tables (TOML; a JSON string is a TOML string)."""
    refs = header_refs(servers)
    tables = []
    for server in servers:
        table = f"\n[mcp_servers.{server.name}]\n"
        if server.transport == "stdio":
            args = ", ".join(json.dumps(a) for a in server.args)
            table += f"command = {json.dumps(server.command)}\nargs = [{args}]\n"
        else:
            table += f"url = {json.dumps(server.url)}\n"
        if server.name in refs:
            pairs = ", ".join(
                f"{json.dumps(h)} = {json.dumps(v)}" for h, v in refs[server.name].items()
            )
            table += f"env_http_headers = {{ {pairs} }}\n"
        tables.append(table)
    return "".join(tables)

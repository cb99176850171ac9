"""What a Harbor task gives its harness: the task's env, its `[environment].skills_dir`
and its `[[environment.mcp_servers]]`.

`skills_dir` is a path inside the task's environment (its image), as in Harbor: the
harness adapter copies its contents into the harness's own skills folder before it
starts (activities/harnesses/skills.py). The task's value wins over the harness's own,
as Harbor's trial prefers the task's skills dir.

`mcp_servers` (Harbor's `MCPServerConfig`): a `stdio` server is the harness's
`mcp_servers` entry (polar/tasks/mcp_spec.py), spawned by the harness in the sandbox;
merged by name with the harness's own, the harness's winning, as Harbor's
`merge_mcp_servers(task, agent)`. `sse` and `streamable-http` servers (the default
transport is `sse`, `http` is `streamable-http`) are refused: their URL names a compose
sidecar or a remote service, and Polar gives the harness stdio servers only (it runs compose
services as sidecars on docker, but writes no URL server into a harness's config yet).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from polar.tasks.harbor_toml import HarborTask, HarborTaskError, first_error
from polar.tasks.spec import HarnessSpec, McpServerSpec

__all__ = ["task_harness"]


def task_harness(
    task: HarborTask, env_cfg: dict[str, Any], base: HarnessSpec, task_env: dict[str, str]
) -> HarnessSpec:
    """`base` (the agent chosen) with the task's env under its own and the task's skills."""
    update: dict[str, Any] = {"env": {**task_env, **base.env}}
    skills = env_cfg.get("skills_dir")
    if skills is not None and not isinstance(skills, str):
        raise HarborTaskError(task.name, "environment.skills_dir", "must be a string (a path)")
    if skills:  # "" is no skills dir, as in Harbor
        if "\x00" in skills or "\n" in skills:
            raise HarborTaskError(task.name, "environment.skills_dir", "not a usable path")
        update["skills_dir"] = skills
    servers = mcp_servers(task, env_cfg.get("mcp_servers"))
    if servers:
        by_name = {s.name: s for s in servers} | {s.name: s for s in base.mcp_servers}
        update["mcp_servers"] = list(by_name.values())
    return base.model_copy(update=update, deep=True)


URL_TRANSPORTS = ("sse", "streamable-http", "http")
URL_REFUSED = (
    "not supported: an MCP server reached by URL is a compose sidecar or a remote service: "
    "Polar gives the harness stdio servers only so far (a session reaches nothing but the "
    "gateway, its egress and its own sidecars); give the server as `stdio` (a command in "
    "the image the harness spawns)"
)


def mcp_servers(task: HarborTask, value: Any) -> list[McpServerSpec]:
    """The task's stdio MCP servers; HarborTaskError naming the first server Polar cannot
    run (a URL transport, a bad field) as `environment.mcp_servers[i]`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise HarborTaskError(task.name, "environment.mcp_servers", "must be an array of tables")
    out = []
    for i, raw in enumerate(value):
        where = f"environment.mcp_servers[{i}]"
        if not isinstance(raw, dict):
            raise HarborTaskError(task.name, where, "must be a table")
        transport = raw.get("transport", "sse")  # Harbor's default
        if transport in URL_TRANSPORTS:
            raise HarborTaskError(task.name, f"{where}.transport", f"{transport!r}: {URL_REFUSED}")
        if raw.get("headers"):
            raise HarborTaskError(task.name, f"{where}.headers", "only for HTTP transports")
        fields = {k: v for k, v in raw.items() if k not in ("url", "headers")}
        try:
            out.append(McpServerSpec.model_validate(fields))
        except ValidationError as exc:
            raise HarborTaskError(task.name, where, first_error(exc)) from exc
    return list({s.name: s for s in out}.values())  # one name twice: the last, as Harbor

"""What a Harbor task gives its harness: the user it runs as (`[agent].user`, a step's
`[steps.agent].user`), the task's env, its `[environment].skills_dir` and its
`[[environment.mcp_servers]]`.

`skills_dir` is a path inside the task's environment (its image), as in Harbor: the
harness adapter copies its contents into the harness's own skills folder before it
starts (activities/harnesses/skills.py). The task's value wins over the harness's own,
as Harbor's trial prefers the task's skills dir.

`mcp_servers` (Harbor's `MCPServerConfig`, polar/tasks/mcp_spec.py): merged by name with
the harness's own, the harness's winning, as Harbor's `merge_mcp_servers(task, agent)`.
A `stdio` server is spawned by the harness in the sandbox. An `sse` or `streamable-http`
one (Harbor's default transport is `sse`; `http` is `streamable-http`) is reached at its
`url`: a host that is one of the task's compose services is that sidecar, on the session's
own private network; any other host is outside the session, reachable only where the
agent's network allows egress (`public`, or `allowlist` naming the host), else refused at
load. A header's `${VAR}` is resolved from the harness's env (the task's env under the
harness's own) or else from the loader's environment, as Harbor resolves it from the
agent's env or else the host's; a variable taken from the loader's environment is added to
the harness's env, for the harness to resolve at its start. An unset one is refused here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from polar.network_policy import parse_allowed_host
from polar.tasks.harbor_toml import HarborTask, HarborTaskError, first_error
from polar.tasks.mcp_spec import header_variables
from polar.tasks.spec import HarnessSpec, McpServerSpec, NetworkSpec, RuntimeSpec

__all__ = ["McpReach", "agent_user", "task_harness"]


def task_harness(
    task: HarborTask,
    env_cfg: dict[str, Any],
    base: HarnessSpec,
    task_env: dict[str, str],
    reach: McpReach,
) -> HarnessSpec:
    """`base` (the agent chosen) with the task's env under its own, the task's skills and
    its MCP servers (`reach`: what a URL server may name)."""
    env = {**task_env, **base.env}
    update: dict[str, Any] = {"env": env}
    skills = env_cfg.get("skills_dir")
    if skills is not None and not isinstance(skills, str):
        raise HarborTaskError(task.name, "environment.skills_dir", "must be a string (a path)")
    if skills:  # "" is no skills dir, as in Harbor
        if "\x00" in skills or "\n" in skills:
            raise HarborTaskError(task.name, "environment.skills_dir", "not a usable path")
        update["skills_dir"] = skills
    servers = mcp_servers(task, env_cfg.get("mcp_servers"), reach)
    if servers:
        by_name = {s.name: s for s in servers} | {s.name: s for s in base.mcp_servers}
        update["mcp_servers"] = list(by_name.values())
        env |= header_env(task, servers, env, reach.environ)
    return base.model_copy(update=update, deep=True)


@dataclass(frozen=True)
class McpReach:
    """What a task's URL servers may name: its compose services (`sidecars`), the agent's
    `network`; `environ`, where a header's `${VAR}` not in the harness's env is found."""

    sidecars: frozenset[str]
    network: NetworkSpec
    environ: Mapping[str, str]


def header_env(
    task: HarborTask, servers: list[McpServerSpec], env: dict[str, str], environ: Mapping[str, str]
) -> dict[str, str]:
    """The variables the servers' headers name that the harness's `env` lacks, from
    `environ`; HarborTaskError naming the header of one set in neither (without a default)."""
    out: dict[str, str] = {}
    for i, server in enumerate(servers):
        for header, value in server.headers.items():
            for var, default in header_variables(value):
                if var in env or var in out:
                    continue
                if var in environ:
                    out[var] = environ[var]
                elif default is None:
                    where = f"environment.mcp_servers[{i}].headers.{header}"
                    raise HarborTaskError(task.name, where, f"${{{var}}} is not set here")
    return out


def mcp_servers(task: HarborTask, value: Any, reach: McpReach) -> list[McpServerSpec]:
    """The task's MCP servers; HarborTaskError naming the first server Polar cannot run (a
    bad field, a URL the session cannot reach) as `environment.mcp_servers[i]`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise HarborTaskError(task.name, "environment.mcp_servers", "must be an array of tables")
    out = []
    for i, raw in enumerate(value):
        where = f"environment.mcp_servers[{i}]"
        if not isinstance(raw, dict):
            raise HarborTaskError(task.name, where, "must be a table")
        fields = {"transport": "sse"} | raw  # Harbor's default transport
        try:
            server = McpServerSpec.model_validate(fields)
        except ValidationError as exc:
            raise HarborTaskError(task.name, where, first_error(exc)) from exc
        if (why := unreachable(server, reach)) is not None:
            raise HarborTaskError(task.name, f"{where}.url", why)
        out.append(server)
    return list({s.name: s for s in out}.values())  # one name twice: the last, as Harbor


def unreachable(server: McpServerSpec, reach: McpReach) -> str | None:
    """Why a session cannot reach `server`'s URL (None: it can, or it is stdio)."""
    host = server.host
    if host is None or host in {name.lower() for name in reach.sidecars}:
        return None
    if _loopback(host):
        return (
            f"{server.url!r}: a loopback host is the session's own container, where nothing "
            "serves it (Polar runs no process of the task's there before the harness): serve "
            "it from a service of environment/docker-compose.yaml and name that service"
        )
    network = reach.network
    if network.mode == "public" or (network.mode == "allowlist" and _allowed(server, network)):
        return None
    services = ", ".join(sorted(reach.sidecars)) or "none"
    return (
        f"{server.url!r}: host {host!r} is not one of the task's compose services ({services}), "
        f"and the agent's network is {network.mode!r}: a session reaches only its own "
        "sidecars and the gateway. Serve it from a service of environment/docker-compose.yaml, "
        'or let the agent reach it: [environment] (or [agent]) network_mode = "public", or '
        f'"allowlist" with {host!r} in allowed_hosts, on workers with egress '
        "(POLAR_EGRESS=proxy)"
    )


def _allowed(server: McpServerSpec, network: NetworkSpec) -> bool:
    """Whether an allowlist entry names the URL's host (and port)."""
    parts = urlsplit(server.url or "")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(
            parts.hostname or ""
        )
    except ValueError:
        ip = None
    entries = (parse_allowed_host(e) for e in network.allowed_hosts)
    return any(e.matches(parts.hostname or "", port, ip) for e in entries)


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def agent_user(task: HarborTask, agent: dict[str, Any], where: str = "agent") -> str | None:
    """`[agent].user` (or a step's, `where` naming its table) as a name or a uid, as Harbor
    takes it: the runtime's or the step's `harness_user`; the harness runs as that user
    (`docker exec -u`, as Harbor's agent phase does)."""
    user = agent.get("user")
    if user is None:
        return None
    if isinstance(user, bool) or not isinstance(user, str | int):
        raise HarborTaskError(task.name, f"{where}.user", f"{user!r}: a user name or a uid")
    try:
        return RuntimeSpec(kind="docker", harness_user=str(user)).harness_user
    except ValidationError:
        raise HarborTaskError(
            task.name, f"{where}.user", f"{user!r}: not a user name or uid an engine can run as"
        ) from None

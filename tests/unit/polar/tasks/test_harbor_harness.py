"""What a Harbor task gives its harness (polar/tasks/harbor_harness.py): `[environment]
.skills_dir` is the harness's `skills_dir`, whichever harness runs it; an MCP server is one of
its `mcp_servers` (a URL one when its host is a compose service of the task's, or the agent's
network allows egress to it); a bad one, or one the session cannot reach, is refused by name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_toml import HarborTaskError
from polar.tasks.spec import HarnessSpec, McpServerSpec, TaskSpec
from tests.support.paths import REPO

EXAMPLES = REPO / "examples" / "harbor"


def _copy(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(EXAMPLES / name, tmp_path / name))


@pytest.mark.parametrize("kind", ["pi", "claude_code", "command"])
def test_the_skills_dir_is_the_harness_skills_dir(kind: str) -> None:
    harness = HarnessSpec(kind=kind, command="true" if kind == "command" else None)
    (spec,) = load_harbor_tasks(EXAMPLES / "skill-stamp", harness=harness)
    assert spec.harness.kind == kind and spec.harness.skills_dir == "/opt/task-skills"
    assert TaskSpec.model_validate_json(spec.model_dump_json()) == spec
    (hello,) = load_harbor_tasks(EXAMPLES / "hello-file", harness=harness)
    assert hello.harness.skills_dir is None


@pytest.mark.parametrize(
    ("value", "why"), [("3", "must be a string"), ('"a\\nb"', "not a usable path")]
)
def test_a_bad_skills_dir_is_refused_by_name(tmp_path: Path, value: str, why: str) -> None:
    task = _copy(tmp_path, "skill-stamp")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('"/opt/task-skills"', value))
    with pytest.raises(HarborTaskError, match=why) as info:
        load_harbor_tasks(task)
    assert info.value.field == "environment.skills_dir"


def test_an_empty_skills_dir_is_none_as_in_harbor(tmp_path: Path) -> None:
    task = _copy(tmp_path, "skill-stamp")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('"/opt/task-skills"', '""'))
    (spec,) = load_harbor_tasks(task)
    assert spec.harness.skills_dir is None


# ------------------------------------------------ [[environment.mcp_servers]]


def test_a_stdio_server_is_the_harness_mcp_server() -> None:
    (spec,) = load_harbor_tasks(EXAMPLES / "mcp-vault", harness=HarnessSpec(kind="codex"))
    (server,) = spec.harness.mcp_servers
    assert server == McpServerSpec(
        name="vault", command="python3", args=["/opt/mcp/vault_server.py"]
    )
    assert TaskSpec.model_validate_json(spec.model_dump_json()) == spec


def test_the_harness_own_server_wins_by_name_as_harbor_merges() -> None:
    mine = McpServerSpec(name="vault", command="node", args=["v.js"])
    other = McpServerSpec(name="other", command="x")
    harness = HarnessSpec(kind="codex", mcp_servers=[mine, other])
    (spec,) = load_harbor_tasks(EXAMPLES / "mcp-vault", harness=harness)
    assert spec.harness.mcp_servers == [mine, other]


@pytest.mark.parametrize(
    ("server", "field", "why"),
    [
        # hello-file has no compose services and no network: no URL can be reached
        ('name = "v"\nurl = "http://svc:8000/sse"', "url", "not one of the task's compose"),
        ('name = "v"\ntransport = "http"\nurl = "http://svc/mcp"', "url", "network_mode"),
        ('name = "v"\ntransport = "sse"', "", "'url' is required"),
        ('name = "v"\nurl = "http://svc/sse"\nheaders = {Authorization = "t"}', "", "credential"),
        ('name = "v"\ntransport = "stdio"', "", "command"),
        ('name = "a b"\ntransport = "stdio"\ncommand = "x"', "", "name"),
        ('name = "v"\ntransport = "stdio"\ncommand = "x"\nheaders = {A = "b"}', "", "HTTP"),
    ],
)
def test_a_server_polar_cannot_run_is_refused_by_name(
    tmp_path: Path, server: str, field: str, why: str
) -> None:
    task = _copy(tmp_path, "hello-file")
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + f"\n[[environment.mcp_servers]]\n{server}\n")
    with pytest.raises(HarborTaskError, match=why) as info:
        load_harbor_tasks(task, harness=HarnessSpec(kind="codex"))
    assert info.value.field == "environment.mcp_servers[0]" + (f".{field}" if field else "")


HTTP_TASK = REPO / "examples" / "harbor-features" / "mcp-http-vault"


def test_a_url_server_on_a_compose_service_is_taken_with_its_headers() -> None:
    (spec,) = load_harbor_tasks(HTTP_TASK, harness=HarnessSpec(kind="codex"), environ={})
    (server,) = spec.harness.mcp_servers
    assert server == McpServerSpec(
        name="vault",
        transport="streamable-http",
        url="http://vault:8000/mcp",
        headers={"Authorization": "Bearer ${VAULT_TOKEN}"},  # as written: resolved at start
    )
    assert spec.harness.env["VAULT_TOKEN"] == "vault-demo-token"  # compose main's env
    assert [s.name for s in spec.runtime.sidecars] == ["vault"]
    assert TaskSpec.model_validate_json(spec.model_dump_json()) == spec


def _with_server(tmp_path: Path, server: str, network: str = "no-network") -> Path:
    """hello-file with `server`, its network `mode` or `allowlist:host,host`."""
    task = _copy(tmp_path, "hello-file")
    toml = task / "task.toml"
    mode, _, hosts = network.partition(":")
    line = f'network_mode = "{mode}"' + (f"\nallowed_hosts = {hosts.split(',')!r}" if hosts else "")
    text = toml.read_text().replace('network_mode = "no-network"', line)
    toml.write_text(text + f"\n[[environment.mcp_servers]]\n{server}\n")
    return task


@pytest.mark.parametrize(
    ("network", "url", "reached"),
    [
        ("public", "https://mcp.example.com/sse", True),
        ("allowlist:*.example.com", "https://mcp.example.com/sse", True),
        ("allowlist:other.org", "https://mcp.example.com/sse", False),
        ("allowlist:mcp.example.com:8443", "https://mcp.example.com/x", False),
        ("allowlist:mcp.example.com:8443", "https://mcp.example.com:8443/x", True),
        ("no-network", "https://mcp.example.com/sse", False),
    ],
)
def test_a_remote_url_needs_the_agents_egress(
    tmp_path: Path, network: str, url: str, reached: bool
) -> None:
    task = _with_server(tmp_path, f'name = "r"\nurl = "{url}"', network)
    if reached:
        (spec,) = load_harbor_tasks(task, harness=HarnessSpec(kind="claude_code"))
        assert spec.harness.mcp_servers[0].transport == "sse"  # Harbor's default
        return
    with pytest.raises(HarborTaskError, match="POLAR_EGRESS=proxy") as info:
        load_harbor_tasks(task, harness=HarnessSpec(kind="claude_code"))
    assert info.value.field == "environment.mcp_servers[0].url"


def test_a_header_variable_comes_from_the_env_or_the_loaders_environment(tmp_path: Path) -> None:
    server = 'name = "r"\nurl = "https://m.example/sse"\nheaders = {X-Token = "${TOK}"}'
    task = _with_server(tmp_path, server, "public")
    harness = HarnessSpec(kind="claude_code")
    with pytest.raises(HarborTaskError, match=r"\$\{TOK\} is not set here") as info:
        load_harbor_tasks(task, harness=harness, environ={})
    assert info.value.field == "environment.mcp_servers[0].headers.X-Token"
    (spec,) = load_harbor_tasks(task, harness=harness, environ={"TOK": "from-loader"})
    assert spec.harness.env["TOK"] == "from-loader"  # travels with the session
    mine = HarnessSpec(kind="claude_code", env={"TOK": "the-harness"})
    (spec,) = load_harbor_tasks(task, harness=mine, environ={"TOK": "from-loader"})
    assert spec.harness.env["TOK"] == "the-harness"


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/sse", "http://localhost/mcp", "http://[::1]/"]
)
def test_a_loopback_url_is_refused_whatever_the_network(tmp_path: Path, url: str) -> None:
    task = _with_server(tmp_path, f'name = "r"\nurl = "{url}"', "public")
    with pytest.raises(HarborTaskError, match="loopback") as info:
        load_harbor_tasks(task, harness=HarnessSpec(kind="claude_code"))
    assert info.value.field == "environment.mcp_servers[0].url"

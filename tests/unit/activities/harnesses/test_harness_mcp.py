"""A task's MCP servers in each harness's own MCP config (activities/harnesses/mcp.py):
Claude Code's `--mcp-config` file, Codex's `[mcp_servers.*]` tables, Qwen Code's
settings.json `mcpServers`, a JSON file in $POLAR_MCP_CONFIG for `command`; Pi refuses
them, naming why, where `check_harness` runs (submit, tasks load, the worker)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from activities.harnesses import (
    InvalidKindConfig,
    Launch,
    check_harness,
)
from activities.harnesses.mcp import MCP_ENV, MCP_FILE
from polar.tasks.spec import HarnessSpec, McpServerSpec
from tests.support.harness_launches import prepared_launch

VAULT = McpServerSpec(name="vault", command="python3", args=["/opt/mcp/vault.py", "--x=1"])
EXPECTED = {"command": "python3", "args": ["/opt/mcp/vault.py", "--x=1"]}
HTTP_SERVER: dict[str, Any] = {
    "name": "vault",
    "transport": "streamable-http",
    "url": "http://vault:8000/mcp",
    "headers": {"Authorization": "Bearer ${TOKEN}", "X-Project": "orion"},
}
HTTP = McpServerSpec(**HTTP_SERVER)
SSE = McpServerSpec(name="events", transport="sse", url="https://mcp.example/sse")
ENV = {"TOKEN": "tok-1"}
# the header values, resolved from the harness's env, in the variables the configs name
HEADER_ENV = {"POLAR_MCP_HEADER_1_0": "Bearer tok-1", "POLAR_MCP_HEADER_1_1": "orion"}
REFS = {"Authorization": "${POLAR_MCP_HEADER_1_0}", "X-Project": "${POLAR_MCP_HEADER_1_1}"}


def _launch(kind: str, home: Path, servers: list[McpServerSpec]) -> Launch:
    return prepared_launch(kind, home, mcp_servers=servers, env=ENV)


def test_claude_code_gets_its_mcp_config_file(tmp_path: Path) -> None:
    launch = _launch("claude_code", tmp_path, [VAULT])
    assert launch.argv is not None
    i = launch.argv.index("--mcp-config")
    assert launch.argv[i + 1 : i + 3] == [f"/h/{MCP_FILE}", "--strict-mcp-config"]
    written = json.loads((tmp_path / MCP_FILE).read_text())
    assert written == {"mcpServers": {"vault": {"type": "stdio", **EXPECTED}}}
    assert "--mcp-config" not in (_launch("claude_code", tmp_path / "b", []).argv or [])


def test_codex_gets_tables_in_its_config_toml(tmp_path: Path) -> None:
    _launch("codex", tmp_path, [VAULT])
    config = tomllib.loads((tmp_path / ".codex" / "config.toml").read_text())
    assert config["mcp_servers"] == {"vault": EXPECTED}
    assert config["model_providers"]["polar"]["wire_api"] == "responses"  # the rest kept
    _launch("codex", tmp_path / "b", [])
    assert "mcp_servers" not in tomllib.loads((tmp_path / "b/.codex/config.toml").read_text())


def test_qwen_code_gets_them_in_its_settings(tmp_path: Path) -> None:
    _launch("qwen_code", tmp_path, [VAULT])
    settings = json.loads((tmp_path / ".qwen" / "settings.json").read_text())
    assert settings["mcpServers"] == {"vault": EXPECTED}
    assert settings["telemetry"] == {"enabled": False}  # the rest kept


def test_the_command_harness_is_told_the_config_file(tmp_path: Path) -> None:
    launch = _launch("command", tmp_path, [VAULT])
    assert launch.env[MCP_ENV] == f"/h/{MCP_FILE}"
    assert (
        json.loads((tmp_path / MCP_FILE).read_text())["mcpServers"]["vault"]["args"]
        == (EXPECTED["args"])
    )
    assert MCP_ENV not in _launch("command", tmp_path / "b", []).env


def test_pi_refuses_mcp_servers_naming_why() -> None:
    check_harness(HarnessSpec(kind="pi"), "x")
    with pytest.raises(InvalidKindConfig, match="harness.mcp_servers: harness kind 'pi'"):
        check_harness(HarnessSpec(kind="pi", mcp_servers=[VAULT]), "x")
    for kind in ("codex", "claude_code", "qwen_code"):
        check_harness(HarnessSpec(kind=kind, mcp_servers=[VAULT]), "x")


@pytest.mark.parametrize(
    "server",
    [
        {"name": "has space", "command": "x"},
        {"name": "v", "command": ""},
        {"name": "v", "command": "x", "transport": "sse"},
        {"name": "v", "transport": "sse"},
        {"name": "v", "transport": "http", "url": "ftp://x/mcp"},
        {"name": "v", "transport": "http", "url": "http:///mcp"},
        {"name": "v", "command": "x", "headers": {"A": "b"}},
        {"name": "v", "transport": "sse", "url": "http://x", "headers": {"Bad Name": "b"}},
        {"name": "v", "transport": "sse", "url": "http://x", "headers": {"X": "a\nb"}},
        {"name": "v", "transport": "sse", "url": "http://x", "headers": {"X": "${A"}},
        # a credential must come from a ${VAR}, never literally, as Harbor demands
        {"name": "v", "transport": "sse", "url": "http://x", "headers": {"Authorization": "t"}},
        {"name": "v", "transport": "sse", "url": "http://x", "headers": {"X-Api-Key": "k"}},
        {
            "name": "v",
            "transport": "sse",
            "url": "http://x",
            "headers": {"Authorization": "Bearer ${T:-literal}"},
        },
    ],
)
def test_a_bad_server_is_refused_by_the_spec(server: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        HarnessSpec.model_validate(
            {"kind": "claude_code", "env": {"T": "x"}, "mcp_servers": [server]}
        )


def test_a_header_variable_must_be_in_the_harness_env() -> None:
    server = McpServerSpec(**HTTP_SERVER)
    with pytest.raises(ValidationError, match=r"vault.headers.Authorization: \$\{TOKEN\}"):
        HarnessSpec(kind="codex", mcp_servers=[server])
    spec = HarnessSpec(kind="codex", env={"TOKEN": "t"}, mcp_servers=[server])
    assert HarnessSpec.model_validate_json(spec.model_dump_json()) == spec
    with_default = McpServerSpec(
        name="v", transport="sse", url="http://x", headers={"X": "${A:-b}"}
    )
    HarnessSpec(kind="codex", mcp_servers=[with_default])  # a default needs no variable
    assert McpServerSpec(name="v", transport="http", url="http://x").transport == "streamable-http"


def test_names_are_unique_and_none_leaves_the_json_as_it_was() -> None:
    with pytest.raises(ValidationError, match="vault repeated"):
        HarnessSpec(kind="codex", mcp_servers=[VAULT, VAULT])
    assert "mcp_servers" not in HarnessSpec(kind="codex").model_dump_json()


# ------------------------------------------------ servers reached by URL


def test_url_servers_in_each_config(tmp_path: Path) -> None:
    servers = [VAULT.model_copy(update={"name": "local"}), HTTP, SSE]
    claude = _launch("claude_code", tmp_path / "c", servers)
    entries = json.loads((tmp_path / "c" / MCP_FILE).read_text())["mcpServers"]
    assert entries["vault"] == {"type": "http", "url": "http://vault:8000/mcp", "headers": REFS}
    assert entries["events"] == {"type": "sse", "url": "https://mcp.example/sse"}
    assert claude.env.items() >= HEADER_ENV.items()
    # the config files hold the variables' names, never the credential
    assert "tok-1" not in (tmp_path / "c" / MCP_FILE).read_text()

    qwen = _launch("qwen_code", tmp_path / "q", servers)
    entries = json.loads((tmp_path / "q" / ".qwen" / "settings.json").read_text())["mcpServers"]
    assert entries["vault"] == {"httpUrl": "http://vault:8000/mcp", "headers": REFS}
    assert entries["events"] == {"url": "https://mcp.example/sse"}
    assert qwen.env.items() >= HEADER_ENV.items()

    command = _launch("command", tmp_path / "m", servers)
    assert json.loads((tmp_path / "m" / MCP_FILE).read_text())["mcpServers"]["vault"][
        "headers"
    ] == (REFS)
    assert command.env.items() >= HEADER_ENV.items()


def test_codex_gets_a_streamable_http_url_with_env_headers(tmp_path: Path) -> None:
    launch = _launch("codex", tmp_path, [VAULT.model_copy(update={"name": "local"}), HTTP])
    config = tomllib.loads((tmp_path / ".codex" / "config.toml").read_text())
    assert config["mcp_servers"]["vault"] == {
        "url": "http://vault:8000/mcp",
        "env_http_headers": {k: v[2:-1] for k, v in REFS.items()},
    }
    assert launch.env.items() >= HEADER_ENV.items()
    assert "tok-1" not in (tmp_path / ".codex" / "config.toml").read_text()


def test_codex_refuses_sse_naming_why_and_the_others_take_it() -> None:
    spec = HarnessSpec(kind="codex", mcp_servers=[VAULT, SSE])
    with pytest.raises(InvalidKindConfig, match=r"mcp_servers\[1\].transport: .*'codex'.*'sse'"):
        check_harness(spec, "x")
    check_harness(HarnessSpec(kind="codex", env=ENV, mcp_servers=[HTTP]), "x")
    for kind in ("claude_code", "qwen_code"):
        check_harness(HarnessSpec(kind=kind, env=ENV, mcp_servers=[HTTP, SSE]), "x")
    with pytest.raises(InvalidKindConfig, match="takes no MCP servers"):
        check_harness(HarnessSpec(kind="pi", mcp_servers=[SSE]), "x")

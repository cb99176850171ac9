"""A task's MCP servers in each harness's own MCP config (activities/harnesses/mcp.py):
Claude Code's `--mcp-config` file, Codex's `[mcp_servers.*]` tables, Qwen Code's
settings.json `mcpServers`, a JSON file in $POLAR_MCP_CONFIG for `command`; Pi refuses
them, naming why, where `check_harness` runs (submit, tasks load, the worker)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

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


def _launch(kind: str, home: Path, servers: list[McpServerSpec]) -> Launch:
    return prepared_launch(kind, home, mcp_servers=servers)


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
        {"name": "v", "command": "x", "url": "http://x"},
    ],
)
def test_a_bad_server_is_refused_by_the_spec(server: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        HarnessSpec.model_validate({"kind": "codex", "mcp_servers": [server]})


def test_names_are_unique_and_none_leaves_the_json_as_it_was() -> None:
    with pytest.raises(ValidationError, match="vault repeated"):
        HarnessSpec(kind="codex", mcp_servers=[VAULT, VAULT])
    assert "mcp_servers" not in HarnessSpec(kind="codex").model_dump_json()

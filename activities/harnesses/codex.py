"""Codex CLI (`@openai/codex`): OpenAI Responses API, configured by `$CODEX_HOME/config.toml`.

A custom provider `polar` points at the gateway's `/v1` with the session key
read from POLAR_API_KEY and `wire_api = "responses"` (this version refuses
`chat`); approvals never, its own bubblewrap sandbox off (the runtime is the
sandbox), update checks, analytics, plugins and apps off, no client retries
(the gateway records every attempt). Setting only OPENAI_BASE_URL does not
work: Codex then goes to the public API. Native logs: the rollout transcripts
under `$CODEX_HOME/sessions/`. MCP servers: `[mcp_servers.*]` in that config.toml
(stdio and streamable HTTP; `CodexConfig` refuses SSE, which Codex has no client for).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from activities import safe_files
from activities.harnesses.base import (
    KEY_ENV,
    AgentCliConfig,
    CliAdapter,
    HarnessContext,
    toml_str,
    write_config,
)
from activities.harnesses.mcp import codex_tables

CONFIG = ".codex/config.toml"


class CodexConfig(AgentCliConfig):
    """Codex's config: the shared fields only; its MCP client has no SSE transport."""

    mcp_transports: ClassVar[tuple[str, ...]] = ("stdio", "streamable-http")
    mcp_transport_refused: ClassVar[str] = (
        "Codex's MCP client speaks stdio and streamable HTTP only (a `url` server in its "
        "config.toml is streamable HTTP; it has no SSE client): serve the server over "
        'streamable HTTP (transport = "streamable-http"), or run the task with a harness '
        "that speaks SSE (claude_code, qwen_code)"
    )


class CodexAdapter(CliAdapter):
    kind = "codex"
    config_model = CodexConfig
    package = "@openai/codex"
    binary = "codex"
    api = "openai_responses"
    route = "/v1/responses"
    log_globs = (".codex/sessions/**/*.jsonl", ".codex/log/*.log")

    def mcp_config(
        self, home: Path, home_rt: str, ctx: HarnessContext, files: list[Path]
    ) -> list[str]:
        """`[mcp_servers.<name>]` tables added to the config.toml `configure` wrote."""
        written = safe_files.read_bytes(home, CONFIG) or b""
        text = written.decode() + codex_tables(ctx.spec.mcp_servers)
        write_config(home, CONFIG, text, files)
        return []

    def skills_folder(self, home_rt: str) -> str:
        """Codex reads `$HOME/.agents/skills`, where Harbor puts them."""
        return f"{home_rt}/.agents/skills"

    def configure(
        self, home: Path, home_rt: str, workdir: str, ctx: HarnessContext, files: list[Path]
    ) -> tuple[list[str], dict[str, str]]:
        config = f"""\
model = {toml_str(ctx.model)}
model_provider = "polar"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false
apps = false

[model_providers.polar]
name = "Polar gateway"
base_url = {toml_str(ctx.gateway + "/v1")}
env_key = {toml_str(KEY_ENV)}
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""
        write_config(home, CONFIG, config, files)
        args = ["exec", "--skip-git-repo-check", "--cd", workdir, ctx.instruction]
        return args, {"CODEX_HOME": f"{home_rt}/.codex"}

"""Claude Code (`@anthropic-ai/claude-code`): Anthropic Messages API, configured by env only.

ANTHROPIC_BASE_URL is the gateway root (no `/v1`), the session key goes as
`x-api-key`, every model slot (main, small/fast, sub-agents) is the task's
model, and non-essential traffic (probes, title generation, telemetry, error
reports, auto-update) is off. `-p` runs one non-interactive turn;
`--dangerously-skip-permissions` lets it use its tools unattended (as root it
also needs IS_SANDBOX=1). Native logs: the session transcript under
`~/.claude/projects/`. MCP servers: `--mcp-config` (activities/harnesses/mcp.py).
"""

from __future__ import annotations

from pathlib import Path

from activities.harnesses.base import CliAdapter, HarnessContext, write_config
from activities.harnesses.mcp import MCP_FILE, mcp_json_text


class ClaudeCodeAdapter(CliAdapter):
    kind = "claude_code"
    package = "@anthropic-ai/claude-code"
    binary = "claude"
    api = "anthropic_messages"
    route = "/v1/messages"
    log_globs = (".claude/projects/**/*.jsonl",)

    def mcp_config(
        self, home: Path, home_rt: str, ctx: HarnessContext, files: list[Path]
    ) -> list[str]:
        """Its `mcpServers` JSON in a file of HOME, given with `--mcp-config`; with
        `--strict-mcp-config` it loads no other server."""
        write_config(home, MCP_FILE, mcp_json_text(ctx.spec.mcp_servers), files)
        return ["--mcp-config", f"{home_rt}/{MCP_FILE}", "--strict-mcp-config"]

    def skills_folder(self, home_rt: str) -> str:
        """Claude Code reads `~/.claude/skills` (its config dir: no CLAUDE_CONFIG_DIR here)."""
        return f"{home_rt}/.claude/skills"

    def configure(
        self, home: Path, home_rt: str, workdir: str, ctx: HarnessContext, files: list[Path]
    ) -> tuple[list[str], dict[str, str]]:
        model = ctx.model
        env = {
            "ANTHROPIC_BASE_URL": ctx.gateway,
            "ANTHROPIC_API_KEY": ctx.api_key,
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "CLAUDE_CODE_SUBAGENT_MODEL": model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_BUG_COMMAND": "1",
            "IS_SANDBOX": "1",  # lets --dangerously-skip-permissions run as root
        }
        args = ["-p", ctx.instruction, "--dangerously-skip-permissions", "--output-format", "json"]
        return args, env

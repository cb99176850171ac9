"""Qwen Code (`@qwen-code/qwen-code`): OpenAI Chat Completions, env plus `~/.qwen/settings.json`.

OPENAI_BASE_URL is the gateway's `/v1`, the key the session key, `--auth-type
openai`; `--yolo` is what makes it declare its shell, edit and write tools in a
non-interactive run. The settings turn off auto-update, usage statistics,
telemetry, follow-up suggestions and the managed auto-memory (which otherwise
makes an extra memory-extraction call after the turn). Native logs: the chat
transcript under `~/.qwen/projects/*/chats/` and its own logs under `~/.qwen/tmp/`.
MCP servers: `mcpServers` in that settings.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from activities.harnesses.base import CliAdapter, HarnessContext, write_config
from activities.harnesses.mcp import mcp_servers_json

SETTINGS = {
    "general": {"enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "ui": {"enableFollowupSuggestions": False, "enableCacheSharing": False},
    "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
    "model": {"skipNextSpeakerCheck": True},
}


class QwenCodeAdapter(CliAdapter):
    kind = "qwen_code"
    package = "@qwen-code/qwen-code"
    binary = "qwen"
    api = "openai_chat"
    route = "/v1/chat/completions"
    log_globs = (".qwen/projects/**/*.jsonl", ".qwen/tmp/**/*.json", ".qwen/tmp/**/*.jsonl")

    def mcp_config(
        self, home: Path, home_rt: str, ctx: HarnessContext, files: list[Path]
    ) -> list[str]:
        """`mcpServers` in its settings.json (rewritten with them), as Harbor writes it
        (Qwen Code resolves `${VAR}` in its settings, the header values among them)."""
        settings = SETTINGS | mcp_servers_json(ctx.spec.mcp_servers, qwen=True)
        write_config(home, ".qwen/settings.json", json.dumps(settings, indent=2), files)
        return []

    def skills_folder(self, home_rt: str) -> str:
        """Qwen Code reads `~/.qwen/skills`."""
        return f"{home_rt}/.qwen/skills"

    def configure(
        self, home: Path, home_rt: str, workdir: str, ctx: HarnessContext, files: list[Path]
    ) -> tuple[list[str], dict[str, str]]:
        write_config(home, ".qwen/settings.json", json.dumps(SETTINGS, indent=2), files)
        env = {
            "OPENAI_BASE_URL": ctx.gateway + "/v1",
            "OPENAI_API_KEY": ctx.api_key,
            "OPENAI_MODEL": ctx.model,
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
        }
        return ["--auth-type", "openai", "--yolo", ctx.instruction], env

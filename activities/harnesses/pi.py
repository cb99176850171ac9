"""Pi (`@mariozechner/pi-coding-agent`): OpenAI Chat Completions through `models.json`.

A custom provider `polar` in `~/.pi/agent/models.json` with the gateway's
`/v1`, `api: "openai-completions"`, the key read from POLAR_API_KEY, and the
compat switches for a plain Chat Completions server (no developer role, no
reasoning effort). PI_OFFLINE=1 stops its update and package lookups.
`--mode json` prints every event of the run as JSON lines on stdout: that is
its native log (kept as the stdout artifact); `--no-session` writes no other.
It takes no MCP servers (`PiConfig.mcp_refused` says why).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

from activities.harnesses.base import (
    KEY_ENV,
    AgentCliConfig,
    CliAdapter,
    HarnessContext,
    write_config,
)


class PiConfig(AgentCliConfig):
    """Pi's config: the shared fields only; no MCP servers."""

    mcp_refused: ClassVar[str | None] = (
        "Pi has no MCP client of its own (Harbor adds the pi-mcp-adapter extension, for Pi "
        ">=0.84.1, installed from npm at run time; Polar pins Pi 0.73.1 and its sessions have "
        "no network to install it): run the task with codex, claude_code or qwen_code"
    )


class PiAdapter(CliAdapter):
    kind = "pi"
    config_model = PiConfig
    package = "@mariozechner/pi-coding-agent"
    binary = "pi"
    api = "openai_chat"
    route = "/v1/chat/completions"
    log_globs = ()  # --mode json: the event log is stdout

    def skills_folder(self, home_rt: str) -> str:
        """Pi reads `$HOME/.agents/skills` too, where Harbor puts them."""
        return f"{home_rt}/.agents/skills"

    def configure(
        self, home: Path, home_rt: str, workdir: str, ctx: HarnessContext, files: list[Path]
    ) -> tuple[list[str], dict[str, str]]:
        models = {
            "providers": {
                "polar": {
                    "baseUrl": ctx.gateway + "/v1",
                    "api": "openai-completions",
                    "apiKey": KEY_ENV,
                    "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                    "models": [{"id": ctx.model}],
                }
            }
        }
        write_config(home, ".pi/agent/models.json", json.dumps(models, indent=2), files)
        env = {"PI_CODING_AGENT_DIR": f"{home_rt}/.pi/agent", "PI_OFFLINE": "1"}
        args = ["--provider", "polar", "--model", ctx.model, "--no-session"]
        return [*args, "--mode", "json", "-p", ctx.instruction], env

"""The `command` harness: any shell command that calls an LLM API.

It runs in the session's workspace with the session's gateway URL and key in
the environment under every name common clients read (OpenAI, Anthropic,
Google's `GOOGLE_GEMINI_BASE_URL` / `GEMINI_API_KEY` / `GOOGLE_API_KEY`, and
POLAR_*), and the instruction in POLAR_INSTRUCTION. Extra `args` are appended
to the command, shell-quoted. What it writes under `$POLAR_ARTIFACTS_DIR` (an
empty directory in its HOME) is kept with the session's logs in S3
(activities/harnesses/artifacts.py). A task's `skills_dir` is named in $POLAR_SKILLS_DIR, and its
MCP servers' config (`{"mcpServers": ...}`, the shape Claude Code reads) is a file
named in $POLAR_MCP_CONFIG: a command spawns them itself, if it speaks MCP.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from activities.harnesses.artifacts import ARTIFACTS_ENV, ARTIFACTS_SUBDIR
from activities.harnesses.base import (
    HarnessConfig,
    HarnessContext,
    Launch,
    polar_env,
    write_config,
)
from activities.harnesses.mcp import MCP_ENV, MCP_FILE, header_env, mcp_json_text
from activities.harnesses.skills import with_skills
from polar.tasks.spec import HarnessSpec


class CommandConfig(HarnessConfig):
    """`{"kind": "command", "command": "..."}`: the shell command sits at the harness's top
    level, where tasks have always written it."""

    command: str = Field(
        default="", validate_default=True, description="the shell command run in the workspace"
    )

    @field_validator("command")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("harness kind 'command' needs a non-empty 'command'")
        return v

    @classmethod
    def written(cls, spec: HarnessSpec) -> dict[str, Any] | None:
        """The top-level `command`, where it is set."""
        return None if spec.command is None else {"command": spec.command}

    @classmethod
    def where(cls, spec: HarnessSpec) -> str:
        return "harness"

    @classmethod
    def refusal(cls, spec: HarnessSpec) -> str | None:
        """None: this kind takes the top-level `command`."""
        return None

    def written_into(self, spec: HarnessSpec) -> HarnessSpec:
        """`spec` as it is: its top-level `command` is the config."""
        return spec


def gateway_env(
    *, gateway_url: str, api_key: str, model: str, session_id: str, task_id: str
) -> dict[str, str]:
    """Environment that points OpenAI-, Anthropic-, Google- and Polar-aware clients at the
    gateway (each provider's conventional variables)."""
    base = gateway_url.rstrip("/")
    return {
        "OPENAI_BASE_URL": f"{base}/v1",
        "OPENAI_API_KEY": api_key,
        "OPENAI_MODEL": model,
        "ANTHROPIC_BASE_URL": base,
        "ANTHROPIC_API_KEY": api_key,
        "ANTHROPIC_MODEL": model,
        # google-genai reads the root (it adds /v1beta/models/...) and either key variable
        "GOOGLE_GEMINI_BASE_URL": base,
        "GEMINI_API_KEY": api_key,
        "GOOGLE_API_KEY": api_key,
        "GEMINI_MODEL": model,
        "POLAR_GATEWAY_URL": base,
        "POLAR_BASE_URL": f"{base}/v1",
        "POLAR_API_KEY": api_key,
        "POLAR_MODEL": model,
        "POLAR_SESSION_ID": session_id,
        "POLAR_TASK_ID": task_id,
    }


def command_harness(
    spec: HarnessSpec, *, instruction: str, base_env: dict[str, str]
) -> tuple[str, dict[str, str]]:
    """The shell command and environment for a `command` harness."""
    env = dict(base_env)
    env["POLAR_INSTRUCTION"] = instruction
    env.update(spec.env)
    command = spec.command or ""
    if spec.args:
        command = f"{command} {shlex.join(spec.args)}"
    return command, env


class CommandAdapter:
    """The generic harness: the task's own command line; no config files, no native logs, an
    artifacts directory (`$POLAR_ARTIFACTS_DIR`) whose files are kept."""

    kind = "command"
    config_model = CommandConfig

    def prepare(self, home: Path, workdir: str, ctx: HarnessContext) -> Launch:
        (home / ARTIFACTS_SUBDIR).mkdir(parents=True, exist_ok=True)
        home_rt = (ctx.home_in_runtime or str(home)).rstrip("/")
        base_env = gateway_env(
            gateway_url=ctx.gateway_url,
            api_key=ctx.api_key,
            model=ctx.model,
            session_id=ctx.session_id,
            task_id=ctx.task_id,
        )
        base_env |= polar_env(ctx)
        base_env[ARTIFACTS_ENV] = f"{home_rt}/{ARTIFACTS_SUBDIR}"
        if ctx.spec.mcp_servers:  # no MCP client: the servers' config, for it to read
            write_config(home, MCP_FILE, mcp_json_text(ctx.spec.mcp_servers), [])
            base_env[MCP_ENV] = f"{home_rt}/{MCP_FILE}"
            base_env |= header_env(ctx.spec.mcp_servers, ctx.spec.env)
        command, env = command_harness(ctx.spec, instruction=ctx.instruction, base_env=base_env)
        return with_skills(Launch(command=command, env=env), ctx.spec.skills_dir, None)

    def native_logs(self, home: Path) -> list[tuple[str, Path]]:
        return []

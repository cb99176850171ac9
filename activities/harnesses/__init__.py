"""Harness adapters: how each agent program is configured and launched.

One module per harness kind behind one interface (`HarnessAdapter`):
`command` (any shell command), `codex` (Codex CLI), `claude_code` (Claude
Code), `qwen_code` (Qwen Code) and `pi` (Pi). `get_adapter(kind)` picks one.
The CLIs come from `infra/harnesses/` (pinned npm packages); a worker finds
them in `Settings.harness_bin_dir` (`POLAR_HARNESS_BIN_DIR`, default
`infra/harnesses/node_modules/.bin` of this checkout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from activities.harnesses.base import (
    KEY_ENV,
    CliAdapter,
    HarnessContext,
    HarnessNotInstalled,
    Launch,
)
from activities.harnesses.claude_code import ClaudeCodeAdapter
from activities.harnesses.codex import CodexAdapter
from activities.harnesses.command import CommandAdapter
from activities.harnesses.pi import PiAdapter
from activities.harnesses.qwen_code import QwenCodeAdapter
from polar.registry import Registry, UnknownKind


class HarnessAdapter(Protocol):
    """Configure a harness in a fresh HOME, say how to launch it, name its native logs."""

    @property
    def kind(self) -> str:
        """The harness kind this adapter serves (its key in `ADAPTERS`)."""
        ...

    def prepare(self, home: Path, workdir: str, ctx: HarnessContext) -> Launch:
        """Write the harness's config under `home`; the command and env to run in `workdir`."""
        ...

    def native_logs(self, home: Path) -> list[tuple[str, Path]]:
        """(artifact name, file) of each native log the run left in `home`."""
        ...


class UnknownHarness(UnknownKind):
    """No adapter serves this harness kind."""


ADAPTERS: Registry[HarnessAdapter] = Registry(
    "harness kind",
    {
        a.kind: a
        for a in (
            CommandAdapter(),
            CodexAdapter(),
            ClaudeCodeAdapter(),
            QwenCodeAdapter(),
            PiAdapter(),
        )
    },
    UnknownHarness,
)
"""Every harness adapter, by the `HarnessSpec.kind` it serves (polar/registry.py)."""
CLI_ADAPTERS: dict[str, CliAdapter] = {
    k: a for k, a in ADAPTERS.items() if isinstance(a, CliAdapter)
}
"""The adapters of agent CLIs (pinned npm packages), by kind."""


def get_adapter(kind: str) -> HarnessAdapter:
    """The adapter for harness `kind` (UnknownHarness, naming the known kinds, otherwise)."""
    return ADAPTERS.get(kind)


__all__ = [
    "ADAPTERS",
    "CLI_ADAPTERS",
    "KEY_ENV",
    "CliAdapter",
    "HarnessAdapter",
    "HarnessContext",
    "HarnessNotInstalled",
    "Launch",
    "UnknownHarness",
    "get_adapter",
]

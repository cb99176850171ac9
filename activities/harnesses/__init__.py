"""Harness adapters: how each agent program is configured and launched.

One module per harness kind behind one interface (`HarnessAdapter`):
`command` (any shell command), `codex` (Codex CLI), `claude_code` (Claude
Code), `qwen_code` (Qwen Code) and `pi` (Pi). Each module holds the kind's
adapter and its config model (`config_model`, a `HarnessConfig`: what the task
spec holds for the kind). `get_adapter(kind)` picks one; `check_harness`
validates a spec's kind and config (the worker before the harness runs,
`polar submit`, `polar tasks load`); every list of kinds is derived from
`ADAPTERS` (a `Registry`, polar/registry.py). A new harness is its module and
one line: `ADAPTERS.register("mine", MyAdapter())`. The CLIs come from
`infra/harnesses/` (pinned npm packages); a worker finds them in
`Settings.harness_bin_dir` (`POLAR_HARNESS_BIN_DIR`, default
`infra/harnesses/node_modules/.bin` of this checkout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from activities.harnesses.base import (
    KEY_ENV,
    AgentCliConfig,
    CliAdapter,
    HarnessConfig,
    HarnessContext,
    HarnessNotInstalled,
    Launch,
)
from activities.harnesses.claude_code import ClaudeCodeAdapter
from activities.harnesses.codex import CodexAdapter
from activities.harnesses.command import CommandAdapter
from activities.harnesses.pi import PiAdapter
from activities.harnesses.qwen_code import QwenCodeAdapter
from activities.kind_configs import InvalidKindConfig, validated_config
from polar.registry import Registry, UnknownKind
from polar.tasks.spec import HarnessSpec


class HarnessAdapter(Protocol):
    """Configure a harness in a fresh HOME, say how to launch it, name its native logs."""

    @property
    def kind(self) -> str:
        """The harness kind this adapter serves (its key in `ADAPTERS`)."""
        ...

    @property
    def config_model(self) -> type[HarnessConfig]:
        """The kind's config model (`check_harness` validates the spec with it)."""
        ...

    def prepare(self, home: Path, workdir: str, ctx: HarnessContext) -> Launch:
        """Write the harness's config under `home`; the command and env to run in `workdir`
        (with the spec's `skills_dir` in place: activities/harnesses/skills.py; a
        `CliAdapter` names its folder in `skills_folder`)."""
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


def check_harness(spec: HarnessSpec, instruction: str | None = None) -> HarnessConfig:
    """The config of `spec`'s kind, validated by the kind's own model: UnknownHarness naming
    the known kinds, or InvalidKindConfig naming each problem's place (`harness.command:
    ...`, or `instruction: ...` where the kind needs the task's `instruction` and it is
    empty; not checked when None). Run by the worker before the harness runs and by the CLI
    before it submits; never in workflow code."""
    try:
        adapter = ADAPTERS.get(spec.kind)
    except UnknownHarness as exc:
        raise UnknownHarness(f"harness.kind: {exc}", exc.kind, exc.known) from None
    model = adapter.config_model
    refusal = model.refusal(spec) or model.mcp_refusal(spec)
    if refusal is None and instruction is not None:
        refusal = model.instruction_refusal(spec.kind, instruction)
    if refusal is not None:
        raise InvalidKindConfig(refusal)
    return validated_config(model, model.written(spec), model.where(spec))


__all__ = [
    "ADAPTERS",
    "AgentCliConfig",
    "CLI_ADAPTERS",
    "KEY_ENV",
    "CliAdapter",
    "HarnessAdapter",
    "HarnessConfig",
    "HarnessContext",
    "HarnessNotInstalled",
    "InvalidKindConfig",
    "Launch",
    "UnknownHarness",
    "check_harness",
    "get_adapter",
]

"""The base of every settings section: `POLAR_*` environment variables, the data dir, the
log format, and the environment that hands a section's values to a child process."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from polar.assets import checkout_root


def checkout_path(relative: str) -> Path:
    """`relative` inside the checkout Polar runs from (the venvs and npm CLIs that
    infra/setup.sh makes there); in an installed wheel, relative to the working directory.
    Each such path is a setting, and its users say which `POLAR_*` names it when missing."""
    root = checkout_root()
    return root / relative if root is not None else Path(relative)


def default_data_dir() -> Path:
    """The stack's state dir unless `POLAR_DATA_DIR` says otherwise: outside any checkout and
    the default source roots (the worker's working directory), so that a session's pytest,
    whose config search walks up from its workspace through the data dir, never meets the
    project's own `pyproject.toml`. Root: `/var/lib/polar` (root's home is closed to the
    sandbox users, who must reach their session dirs below it); others:
    `$XDG_STATE_HOME/polar`, by default `~/.local/state/polar`."""
    if os.geteuid() == 0:
        return Path("/var/lib/polar")
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if Path(state).is_absolute() else Path.home() / ".local" / "state"
    return base / "polar"


class PolarSettings(BaseSettings):
    """What every process reads; each field is `POLAR_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="POLAR_", extra="ignore")

    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="dev-stack state, logs, the runtimes' session dirs; default: /var/lib/polar "
        "for root, else $XDG_STATE_HOME/polar (~/.local/state/polar): outside the checkout and "
        "the default source roots, so a session's pytest never meets the project's config",
    )
    log_format: str = Field(default="json", description="json (JSON lines) or text")

    def as_env(self) -> dict[str, str]:
        """The `POLAR_*` environment that gives a child process these settings (paths
        resolved, lists and dicts as JSON, as pydantic-settings reads them; None left out)."""
        out: dict[str, str] = {}
        for name, value in self.model_dump().items():
            if value is None:
                continue
            if isinstance(value, Path):
                value = value.resolve()
            elif isinstance(value, list | dict):
                value = json.dumps(value)
            out[f"POLAR_{name.upper()}"] = str(value)
        return out

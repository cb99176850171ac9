"""Harbor task dirs and task.toml as read: the task, the fields Polar refuses, typed values."""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from polar.tasks.spec import MAX_TIMEOUT_S

__all__ = [
    "HarborTask",
    "HarborTaskError",
    "KNOWN_KEYS",
    "check_known_and_supported",
    "find_task_dirs",
    "first_error",
    "read_harbor_task",
    "resolved_env",
    "timeout_seconds",
    "strip_canary",
]

_ENV_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


# every key harbor 0.25 reads, by section; anything else is refused, never ignored
KNOWN_KEYS: dict[str, frozenset[str]] = {
    "": frozenset(
        {
            "schema_version",
            "version",
            "task",
            "metadata",
            "verifier",
            "agent",
            "environment",
            "solution",
            "source",
            "multi_step_reward_strategy",
            "steps",
            "artifacts",
        }
    ),
    "task": frozenset({"name", "version", "description", "authors", "keywords"}),
    "agent": frozenset({"timeout_sec", "user", "network_mode", "allowed_hosts"}),
    "verifier": frozenset(
        {
            "timeout_sec",
            "env",
            "user",
            "environment_mode",
            "environment",
            "collect",
            "network_mode",
            "allowed_hosts",
        }
    ),
    "environment": frozenset(
        {
            "build_timeout_sec",
            "docker_image",
            "os",
            "cpus",
            "memory_mb",
            "storage_mb",
            "memory",
            "storage",
            "gpus",
            "gpu_types",
            "tpu",
            "mcp_servers",
            "env",
            "skills_dir",
            "healthcheck",
            "workdir",
            "allow_internet",
            "network_mode",
            "allowed_hosts",
        }
    ),
    "solution": frozenset({"env"}),
}


# fields whose presence (set, non-empty) Polar cannot honour, and why
_UNSUPPORTED: dict[str, str] = {
    "environment.tpu": "TPUs: this deployment's workers run docker and podman containers on "
    "Linux hosts, none of which offers a TPU slice (Harbor places those on GKE TPU node pools)",
}


class HarborTaskError(ValueError):
    """A Harbor task Polar cannot load or cannot honour (names the task and the field)."""

    def __init__(self, task: str, field: str | None, reason: str) -> None:
        where = f"{task}: {field}" if field else task
        super().__init__(f"harbor task {where}: {reason}")
        self.task, self.field, self.reason = task, field, reason


@dataclass(frozen=True)
class HarborTask:
    """One Harbor task directory as read: its name, files and parsed task.toml."""

    name: str
    dir: Path
    config: dict[str, Any]
    instruction: str

    @property
    def environment_dir(self) -> Path:
        return self.dir / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.dir / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.dir / "solution"

    def section(self, name: str) -> dict[str, Any]:
        value = self.config.get(name) or {}
        if not isinstance(value, dict):
            raise HarborTaskError(self.name, f"[{name}]", "must be a table")
        return value


def find_task_dirs(path: Path) -> list[Path]:
    """`path` if it is a task dir (has task.toml), else its task subdirs, sorted by name."""
    path = Path(path)
    if (path / "task.toml").is_file():
        return [path]
    if not path.is_dir():
        raise HarborTaskError(str(path), None, "not a directory")
    dirs = sorted(p for p in path.iterdir() if (p / "task.toml").is_file())
    if not dirs:
        raise HarborTaskError(
            str(path), None, "neither a task (no task.toml) nor a dataset of them"
        )
    return dirs


def strip_canary(text: str) -> str:
    """The instruction without its leading canary comment lines and the blanks after them
    (Harbor's rule: `<!-- ...canary... -->` or `# ...canary...`)."""
    canary = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
    lines = text.split("\n")
    i = 0
    while i < len(lines) and canary.match(lines[i].strip()):
        i += 1
    while i < len(lines) and lines[i].strip() == "":
        i += 1
    return "\n".join(lines[i:])


def read_harbor_task(task_dir: Path) -> HarborTask:
    """Read one task dir: task.toml, the instruction, the files the verifier needs."""
    task_dir = Path(task_dir).resolve()
    label = task_dir.name
    try:
        config = tomllib.loads((task_dir / "task.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise HarborTaskError(label, "task.toml", str(exc)) from exc
    package = config.get("task")
    if isinstance(package, dict) and isinstance(package.get("name"), str):
        label = package["name"]
    instruction_path = task_dir / "instruction.md"
    if config.get("steps"):  # each step has its own (polar/tasks/harbor_steps.py)
        return HarborTask(name=label, dir=task_dir, config=config, instruction="")
    try:
        instruction = strip_canary(instruction_path.read_text())
    except OSError as exc:
        raise HarborTaskError(label, "instruction.md", f"cannot read it: {exc}") from exc
    return HarborTask(name=label, dir=task_dir, config=config, instruction=instruction)


def refused_fields(task: HarborTask) -> list[tuple[str, str]]:
    """Every (field, reason) of task.toml Polar refuses: not a field of Harbor 0.25's
    task.toml, or one Polar does not support."""
    refused = []
    for section, keys in KNOWN_KEYS.items():
        table = task.config if not section else task.section(section)
        for key in table:
            if key not in keys:
                where = f"{section}.{key}" if section else key
                refused.append((where, "not a field of Harbor 0.25's task.toml"))
    for field, reason in _UNSUPPORTED.items():
        section, _, key = field.rpartition(".")
        table = task.config if not section else task.section(section)
        if table.get(key) not in (None, [], {}, 0, ""):
            refused.append((field, f"not supported: {reason}"))
    return refused


def check_known_and_supported(task: HarborTask) -> None:
    """HarborTaskError naming every field `refused_fields` finds (the first as its field)."""
    refused = refused_fields(task)
    if len(refused) == 1:
        raise HarborTaskError(task.name, *refused[0])
    if refused:
        listed = "; ".join(f"{field}: {reason}" for field, reason in refused)
        raise HarborTaskError(task.name, refused[0][0], f"{len(refused)} fields refused: {listed}")


def timeout_seconds(task: HarborTask, field: str, value: Any, default: float | None) -> Any:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise HarborTaskError(task.name, field, f"{value!r} is not a number of seconds")
    if not (math.isfinite(value) and 1 <= value <= MAX_TIMEOUT_S):
        raise HarborTaskError(task.name, field, f"{value!r}: between 1 s and 7 days")
    return float(value)


def resolved_env(
    task: HarborTask, field: str, table: Any, environ: Mapping[str, str]
) -> dict[str, str]:
    """An env table with Harbor's `${VAR}` / `${VAR:-default}` resolved from `environ`."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise HarborTaskError(task.name, field, "must be a table of names to strings")

    def resolve(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        raise HarborTaskError(task.name, f"{field}.{key}", f"${{{name}}} is not set here")

    out: dict[str, str] = {}
    for key, value in table.items():
        if not isinstance(value, str):
            raise HarborTaskError(task.name, f"{field}.{key}", "must be a string")
        out[str(key)] = _ENV_TEMPLATE.sub(resolve, value)
    return out


def first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{loc}: {err.get('msg')}" if loc else str(err.get("msg"))

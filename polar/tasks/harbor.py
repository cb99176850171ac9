"""Harbor tasks (harbor 0.25's format) → TaskSpecs.

A Harbor task is a directory:

    task.toml          # [task] [metadata] [agent] [verifier] [environment] [solution]
    instruction.md     # what the agent is told (leading canary lines stripped, as Harbor does)
    environment/       # a Dockerfile (built locally: polar/tasks/harbor_images.py), or
                       # [environment].docker_image names a prebuilt image
    tests/test.sh      # the verifier: writes /logs/verifier/reward.txt or reward.json
    solution/solve.sh  # the oracle (polar tasks audit runs it)

A dataset is a directory of such directories. `load_harbor_tasks(path)` reads
either into TaskSpecs: a `docker` runtime of the environment's image, the
task's resources, the agent's timeout as the harness budget, and an evaluator
of kind `harbor` (activities/evaluators/harbor.py) that grades in a fresh
runtime with the task's tests, user and env. Every field Polar cannot honour
is refused with `HarborTaskError` naming the task and the field: nothing is
dropped silently (docs/harbor.md lists them, with the reasons).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import posixpath
import re
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from polar.ids import TASK_ID_MAX
from polar.tasks.spec import (
    MAX_TIMEOUT_S,
    EvaluatorSpec,
    HarborVerifierSpec,
    HarnessSpec,
    NetworkSpec,
    RuntimeSpec,
    TaskSpec,
    Timeouts,
)

__all__ = [
    "HarborTask",
    "HarborTaskError",
    "environment_hash",
    "find_task_dirs",
    "load_harbor_tasks",
    "read_harbor_task",
]

IMAGE_REPO = "polar/harbor-env"
"""Images built from a task's environment/ are `{IMAGE_REPO}:{content hash}`."""
EVALUATE_MARGIN_S = 300.0
"""The evaluate stage's time beyond the verifier's: the fresh runtime, the changes applied."""
NO_NETWORK = "no-network"
_NETWORK_MODES: dict[str, Literal["none", "public", "allowlist"]] = {
    NO_NETWORK: "none",
    "public": "public",
    "allowlist": "allowlist",
}
"""Harbor's network modes and Polar's (RuntimeSpec.network, HarborVerifierSpec.network)."""
_ENV_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

# every key harbor 0.25 reads, by section; anything else is refused, never ignored
_KNOWN: dict[str, frozenset[str]] = {
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
    "steps": "multi-step tasks: a Polar session is one harness run graded once",
    "multi_step_reward_strategy": "multi-step tasks: a Polar session is one harness run",
    "artifacts": "artifact collection: Polar keeps the session's changes, logs and traces",
    "agent.user": "the agent runs as the image's user in Polar's container runtimes",
    "verifier.environment": "a separate verifier image: Polar grades in a fresh runtime of "
    "the task's own environment",
    "verifier.collect": "collect hooks (compose services): Polar runs one container",
    "environment.gpus": "GPUs in the task's container",
    "environment.gpu_types": "GPUs in the task's container",
    "environment.tpu": "TPUs in the task's container",
    "environment.mcp_servers": "MCP servers for the agent",
    "environment.skills_dir": "agent skills directories",
    "environment.healthcheck": "environment healthchecks (no long-running services)",
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
    if config.get("steps"):
        raise HarborTaskError(label, "steps", f"not supported: {_UNSUPPORTED['steps']}")
    try:
        instruction = strip_canary(instruction_path.read_text())
    except OSError as exc:
        raise HarborTaskError(label, "instruction.md", f"cannot read it: {exc}") from exc
    return HarborTask(name=label, dir=task_dir, config=config, instruction=instruction)


def load_harbor_tasks(
    path: Path | str,
    *,
    harness: HarnessSpec | None = None,
    num_sessions: int = 1,
    image_map: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[TaskSpec]:
    """The TaskSpecs of a Harbor task dir, or of every task dir in a dataset dir.

    `harness`: the agent (default: Pi, `pi`); the task's `[environment].env` is added under
    its own env. `image_map`: the deployment's map of image names to local images (the
    task's own `[metadata.polar.image_map]` wins). `environ`: where `${VAR}` templates in
    env tables are resolved (default: this process's environment).
    Raises HarborTaskError naming the task and the field Polar cannot honour.
    """
    return [
        task_spec(
            read_harbor_task(d),
            harness=harness,
            num_sessions=num_sessions,
            image_map=image_map,
            environ=environ,
        )
        for d in find_task_dirs(Path(path))
    ]


def task_spec(
    task: HarborTask,
    *,
    harness: HarnessSpec | None = None,
    num_sessions: int = 1,
    image_map: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> TaskSpec:
    """One read Harbor task → its TaskSpec (HarborTaskError for what Polar cannot honour)."""
    environ = os.environ if environ is None else environ
    _check_known_and_supported(task)
    env_cfg, agent, verifier = (
        task.section("environment"),
        task.section("agent"),
        task.section("verifier"),
    )
    agent_network, verifier_network = _phase_networks(task, env_cfg, agent, verifier)
    _check_environment(task, env_cfg, verifier)
    image = environment_image(task, image_map)
    runtime = _runtime(task, env_cfg, image).model_copy(update={"network": agent_network})
    task_env = _resolved_env(task, "environment.env", env_cfg.get("env"), environ)
    verifier_env = _resolved_env(task, "verifier.env", verifier.get("env"), environ)
    test_script = task.tests_dir / "test.sh"
    if not test_script.is_file():
        raise HarborTaskError(task.name, "tests/test.sh", "missing: the verifier Polar runs")
    verifier_timeout = _seconds(task, "verifier.timeout_sec", verifier.get("timeout_sec"), 600.0)
    agent_timeout = _seconds(task, "agent.timeout_sec", agent.get("timeout_sec"), None)
    timeouts: dict[str, Any] = {
        "evaluate_s": min(MAX_TIMEOUT_S, verifier_timeout + EVALUATE_MARGIN_S)
    }
    if agent_timeout is not None:
        timeouts["harness_s"] = agent_timeout
    user = verifier.get("user")
    base_harness = harness or HarnessSpec(kind="pi")
    metadata = _metadata(task, env_cfg)
    risk = verifier_runs_agent_code(task.tests_dir, runtime.workdir, user)
    if risk is not None:  # `polar submit` and `polar tasks load` print the warning
        metadata["verifier_runs_agent_code"] = risk
    try:
        return TaskSpec(
            task_id=task_id_of(task.name),
            instruction=task.instruction,
            num_sessions=num_sessions,
            runtime=runtime,
            harness=base_harness.model_copy(
                update={"env": {**task_env, **base_harness.env}}, deep=True
            ),
            evaluator=EvaluatorSpec(
                kind="harbor",
                harbor=HarborVerifierSpec(
                    task=task.name,
                    tests_dir=str(task.tests_dir),
                    user=None if user is None else str(user),
                    env={**task_env, **verifier_env},
                    timeout_s=verifier_timeout,
                    network=verifier_network,
                ),
            ),
            timeouts=Timeouts(**timeouts),
            metadata={"harbor": metadata},
        )
    except ValidationError as exc:
        raise HarborTaskError(task.name, None, _first_error(exc)) from exc


_RUNNER = re.compile(
    r"(?<![\w.-])(python[0-9.]*|pytest|py\.test|node|npm|npx|yarn|bun|deno|ruby|perl|php|"
    r"java|go|cargo|make|bash|sh|source|uv|tox|nox|mvn|gradle|dotnet|julia|Rscript|exec)"
    r"(?![\w.-])|sys\.path|PYTHONPATH|NODE_PATH|\bimport\b|\bcd\b|subprocess|os\.system"
)
"""A line that runs code, or points code at a folder (an interpreter, a test runner, an
import path, a `cd` into it)."""
_TEST_RUNNER = re.compile(
    r"^\s*(?:uv run\s+|poetry run\s+)?(?:python[0-9.]*\s+-m\s+)?"
    r"(?:pytest|py\.test|unittest|tox|nox|make|npm\s+(?:run\s+)?test|yarn\s+test|"
    r"cargo\s+test|go\s+test|mvn|gradle)\b"
)
"""A test runner started on its own line (in test.sh, whose folder is the workspace)."""
_DROPS_PRIVILEGES = re.compile(r"\bsetpriv\b[^\n]*--reuid|\brunuser\b|\bsudo\s+-u\b|\bsu\s")
"""test.sh running a command as another user (the code under test, when it is root)."""
MAX_SCANNED_BYTES = 1 << 20


def verifier_runs_agent_code(tests_dir: Path, workdir: str | None, user: Any) -> str | None:
    """Where the task's verifier looks like it runs the agent's code as the user that owns
    /logs/verifier (the verifier user; the image's, root, when unset): a line of `tests/`
    naming the workspace beside something that runs code or imports from it, or a test
    runner test.sh starts in the workspace (its folder) before any `cd`. None where no such
    line is found, or where test.sh runs as root and drops to another user for a command
    (`setpriv --reuid`, `runuser`, `sudo -u`, `su`): the pattern of a verifier whose code
    under test cannot write the reward. A heuristic, for a warning: the audit's
    `code-writes-reward` adversary is the test."""
    workspace = re.compile(re.escape((workdir or "/workspace").rstrip("/")) + r"(?![\w.-])")
    root = user is None or str(user) in ("root", "0")
    found: str | None = None
    drops = False
    files = sorted(p for p in tests_dir.rglob("*") if p.is_file() and not p.is_symlink())
    for path in files:
        try:
            with path.open("rb") as f:
                text = f.read(MAX_SCANNED_BYTES).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        rel = path.relative_to(tests_dir).as_posix()
        drops = drops or bool(_DROPS_PRIVILEGES.search(text))
        moved = False
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0] if rel.endswith((".sh", ".py")) else line
            if found is None and workspace.search(code) and _RUNNER.search(code):
                found = f"tests/{rel}:{number} runs or imports from {workdir}: {line.strip()[:120]}"
            if rel == "test.sh":
                moved = moved or bool(re.match(r"^\s*cd\b", code))
                if found is None and not moved and _TEST_RUNNER.search(code):
                    found = (
                        f"tests/test.sh:{number} starts a test runner in the workspace: "
                        f"{line.strip()[:120]}"
                    )
    if found is None or (root and drops):
        return None
    return found


def verifier_warning(spec: TaskSpec) -> str | None:
    """The warning for a Harbor task whose verifier seems to run the agent's code as the
    owner of /logs/verifier (`metadata.harbor.verifier_runs_agent_code`), or None."""
    harbor = spec.metadata.get("harbor")
    if not isinstance(harbor, dict) or not harbor.get("verifier_runs_agent_code"):
        return None
    risk, name = harbor["verifier_runs_agent_code"], harbor.get("name", spec.task_id)
    return (
        f"Harbor task {name}: its verifier seems to run the agent's code as the user "
        f"who owns /logs/verifier ({risk}): that code can write the reward files itself, and "
        "Polar cannot tell its writes from the verifier's. Run the code under test as another "
        "user than the verifier's (docs/harbor.md, 'Who writes the reward'), and audit the "
        "task (polar tasks audit: the code-writes-reward adversary)."
    )


def task_id_of(name: str) -> str:
    """A Polar task id from a Harbor task name (`org/name` → `org__name`)."""
    tid = re.sub(r"[^A-Za-z0-9._-]", "-", name.replace("/", "__")).lstrip("._-")
    return re.sub(r"\.{2,}", ".", tid)[:TASK_ID_MAX] or "harbor-task"


def environment_hash(task: HarborTask, image_map: Mapping[str, str] | None = None) -> str:
    """The content hash of the task's environment/ (paths, exec bits, bytes, link targets)
    and of the image map entries its Dockerfile's FROM lines use: the build cache key."""
    digest = hashlib.sha256()
    root = task.environment_dir
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"F {rel} {os.access(path, os.X_OK)}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    used = {b: m for b, m in resolved_image_map(task, image_map).items() if b in base_images(task)}
    digest.update(json.dumps(used, sort_keys=True).encode())
    return digest.hexdigest()


def resolved_image_map(task: HarborTask, image_map: Mapping[str, str] | None) -> dict[str, str]:
    """The deployment's image map overlaid with the task's `[metadata.polar.image_map]`."""
    own = (task.section("metadata").get("polar") or {}).get("image_map") or {}
    if not isinstance(own, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in own.items()
    ):
        raise HarborTaskError(task.name, "metadata.polar.image_map", "must map names to names")
    return {**(image_map or {}), **own}


def base_images(task: HarborTask) -> list[str]:
    """The images the Dockerfile's FROM lines name (build stages and `scratch` left out)."""
    dockerfile = task.environment_dir / "Dockerfile"
    if not dockerfile.is_file():
        return []
    stages: set[str] = set()
    images: list[str] = []
    for line in _dockerfile_lines(dockerfile):
        words = line.split()
        if not words or words[0].upper() != "FROM":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if not args:
            continue
        if args[0] not in stages and args[0] != "scratch" and args[0] not in images:
            images.append(args[0])
        if len(args) >= 3 and args[1].upper() == "AS":
            stages.add(args[2])
    return images


def environment_image(task: HarborTask, image_map: Mapping[str, str] | None = None) -> str:
    """The image a task's sessions run: its `docker_image` (through the image map), else
    `polar/harbor-env:{environment hash}` (built by polar/tasks/harbor_images.py)."""
    prebuilt = task.section("environment").get("docker_image")
    if prebuilt:
        return resolved_image_map(task, image_map).get(str(prebuilt), str(prebuilt))
    if not (task.environment_dir / "Dockerfile").is_file():
        raise HarborTaskError(
            task.name,
            "environment",
            "needs environment/Dockerfile or [environment].docker_image",
        )
    return f"{IMAGE_REPO}:{environment_hash(task, image_map)[:20]}"


def _dockerfile_lines(path: Path) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    if current:
        lines.append(current)
    return lines


def _check_known_and_supported(task: HarborTask) -> None:
    for section, keys in _KNOWN.items():
        table = task.config if not section else task.section(section)
        for key in table:
            if key not in keys:
                where = f"{section}.{key}" if section else key
                raise HarborTaskError(task.name, where, "not a field of Harbor 0.25's task.toml")
    for field, reason in _UNSUPPORTED.items():
        section, _, key = field.rpartition(".")
        table = task.config if not section else task.section(section)
        if table.get(key) not in (None, [], {}, 0, ""):
            raise HarborTaskError(task.name, field, f"not supported: {reason}")


def _baseline_policy(task: HarborTask, env_cfg: dict[str, Any]) -> tuple[str, Any]:
    """`[environment]`'s (network_mode, allowed_hosts): Harbor's default `public`; the
    deprecated `allow_internet` only where neither is set (as Harbor applies it)."""
    mode = env_cfg.get("network_mode")
    hosts = env_cfg.get("allowed_hosts")
    if mode is None and hosts is None and env_cfg.get("allow_internet") is not None:
        mode = "public" if env_cfg["allow_internet"] else NO_NETWORK
    return (str(mode) if mode is not None else "public"), hosts


def _network(task: HarborTask, field: str, mode: str, hosts: Any, *, explicit: bool) -> NetworkSpec:
    """One phase's Harbor policy as Polar's NetworkSpec (HarborTaskError naming `field`)."""
    if mode not in _NETWORK_MODES:
        raise HarborTaskError(task.name, f"{field}.network_mode", f"unknown network mode {mode!r}")
    if hosts is not None and not (
        isinstance(hosts, list) and all(isinstance(h, str) for h in hosts)
    ):
        raise HarborTaskError(task.name, f"{field}.allowed_hosts", "must be a list of strings")
    if hosts is not None and mode != "allowlist" and (hosts or explicit):
        raise HarborTaskError(
            task.name,
            f"{field}.allowed_hosts",
            f"is only valid when network_mode = 'allowlist' (it is {mode!r})",
        )
    try:
        return NetworkSpec(mode=_NETWORK_MODES[mode], allowed_hosts=list(hosts or []))
    except ValidationError as exc:
        raise HarborTaskError(task.name, f"{field}.allowed_hosts", _first_error(exc)) from exc


def _phase_networks(
    task: HarborTask, env_cfg: dict[str, Any], agent: dict[str, Any], verifier: dict[str, Any]
) -> tuple[NetworkSpec, NetworkSpec]:
    """The agent's and the verifier's network, as Harbor resolves them: a phase's own
    `network_mode` (with its `allowed_hosts`) when set, else `[environment]`'s. `public` and
    `allowlist` are served by the worker's egress proxy where the deployment turns it on
    (POLAR_EGRESS=proxy); a worker without it refuses the session at its start."""
    base_mode, base_hosts = _baseline_policy(task, env_cfg)
    baseline = _network(task, "environment", base_mode, base_hosts, explicit=False)
    phases = []
    for name, section in (("agent", agent), ("verifier", verifier)):
        if section.get("network_mode") is None:
            if section.get("allowed_hosts") is not None:
                raise HarborTaskError(
                    task.name,
                    f"{name}.allowed_hosts",
                    f"is only valid with {name}.network_mode = 'allowlist'",
                )
            phases.append(baseline)
            continue
        phases.append(
            _network(
                task,
                name,
                str(section["network_mode"]),
                section.get("allowed_hosts"),
                explicit=True,
            )
        )
    return phases[0], phases[1]


def _check_environment(task: HarborTask, env_cfg: dict[str, Any], verifier: dict[str, Any]) -> None:
    if str(env_cfg.get("os", "linux")).lower() != "linux":
        raise HarborTaskError(task.name, "environment.os", "only linux containers are run")
    mode = verifier.get("environment_mode")
    if mode not in (None, "shared", "separate"):
        raise HarborTaskError(task.name, "verifier.environment_mode", f"unknown mode {mode!r}")
    for name in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml"):
        if (task.environment_dir / name).exists():
            raise HarborTaskError(
                task.name, f"environment/{name}", "compose environments: Polar runs one container"
            )


def _workdir(task: HarborTask, env_cfg: dict[str, Any], image: str) -> str | None:
    """Where the task's agent works and from where its changes are graded: `[environment]
    .workdir`, else the Dockerfile's final stage's WORKDIR, else (a prebuilt `docker_image`)
    the image's own when `docker image inspect` reads it here; None: the runtime's default."""
    if env_cfg.get("workdir") is not None:
        return str(env_cfg["workdir"])
    dockerfile = task.environment_dir / "Dockerfile"
    if env_cfg.get("docker_image"):
        return _image_workdir(image)
    if dockerfile.is_file():
        return _dockerfile_workdir(task, dockerfile)
    return None


def _dockerfile_workdir(task: HarborTask, dockerfile: Path) -> str | None:
    """The final stage's WORKDIR (a relative one joined to the one before, a stage built
    `FROM` an earlier one starting from its), or None where the stage sets none."""
    stages: dict[str, str | None] = {}
    current: str | None = None
    last_stage: str | None = None
    for line in _dockerfile_lines(dockerfile):
        words = line.split()
        if not words:
            continue
        if words[0].upper() == "FROM":
            args = [w for w in words[1:] if not w.startswith("--")]
            current = stages.get(args[0]) if args else None
            last_stage = args[2] if len(args) >= 3 and args[1].upper() == "AS" else None
            if last_stage is not None:
                stages[last_stage] = current
            continue
        if words[0].upper() != "WORKDIR" or len(words) < 2:
            continue
        value = line.split(None, 1)[1].strip().strip("\"'")
        if "$" in value:
            raise HarborTaskError(
                task.name,
                "environment/Dockerfile WORKDIR",
                f"{value!r} uses a variable: Polar reads the workspace from the Dockerfile "
                "without building it (set [environment].workdir)",
            )
        current = posixpath.normpath(posixpath.join(current or "/", value))
        if last_stage is not None:
            stages[last_stage] = current
    return current


def _image_workdir(image: str) -> str | None:
    """The local image's WORKDIR (`docker image inspect`, offline), or None where docker or
    the image is not here or it sets none."""
    docker = shutil.which("docker")
    if docker is None:
        return None
    try:
        proc = subprocess.run(
            [docker, "image", "inspect", "--format", "{{.Config.WorkingDir}}", "--", image],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    workdir = proc.stdout.strip()
    return workdir if proc.returncode == 0 and workdir else None


def _runtime(task: HarborTask, env_cfg: dict[str, Any], image: str) -> RuntimeSpec:
    values: dict[str, Any] = {"kind": "docker", "image": image}
    workdir = _workdir(task, env_cfg, image)
    if workdir is not None:
        try:
            values["workdir"] = RuntimeSpec(kind="docker", workdir=workdir).workdir
        except ValidationError as exc:
            where = (
                "environment.workdir"
                if env_cfg.get("workdir") is not None
                else "environment.docker_image"
                if env_cfg.get("docker_image")
                else "environment/Dockerfile WORKDIR"
            )
            raise HarborTaskError(task.name, where, _first_error(exc)) from exc
    if env_cfg.get("cpus") is not None:
        values["cpus"] = env_cfg["cpus"]
    for field, legacy, key in (
        ("memory_mb", "memory", "memory"),
        ("storage_mb", "storage", "disk"),
    ):
        mb = env_cfg.get(field)
        if mb is None and env_cfg.get(legacy) is not None:
            mb = _legacy_size_mb(task, f"environment.{legacy}", env_cfg[legacy])
        if mb is not None:
            if not isinstance(mb, int) or isinstance(mb, bool) or mb < 16:
                raise HarborTaskError(task.name, f"environment.{field}", f"{mb!r}: at least 16")
            values[key] = f"{mb}m"
    try:
        return RuntimeSpec(**values)
    except ValidationError as exc:
        raise HarborTaskError(task.name, "environment", _first_error(exc)) from exc


def _legacy_size_mb(task: HarborTask, field: str, text: Any) -> int:
    """Harbor's deprecated `memory` / `storage` ('2G', '512M') in MB, as Harbor reads them."""
    size = str(text).strip().upper()
    scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}
    if size[-1:] not in scale:
        raise HarborTaskError(task.name, field, f"{text!r}: not like '1G' or '512M'")
    try:
        return int(float(size[:-1]) * scale[size[-1]])
    except ValueError as exc:
        raise HarborTaskError(task.name, field, f"{text!r}: not like '1G' or '512M'") from exc


def _seconds(task: HarborTask, field: str, value: Any, default: float | None) -> Any:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise HarborTaskError(task.name, field, f"{value!r} is not a number of seconds")
    if not (math.isfinite(value) and 1 <= value <= MAX_TIMEOUT_S):
        raise HarborTaskError(task.name, field, f"{value!r}: between 1 s and 7 days")
    return float(value)


def _resolved_env(
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


def _metadata(task: HarborTask, env_cfg: dict[str, Any]) -> dict[str, Any]:
    """What of the task Polar keeps but does not act on (for people and the audit)."""
    package = task.section("task")
    solution = task.section("solution")
    return {
        "name": task.name,
        "dir": str(task.dir),
        "solution_dir": str(task.solution_dir),
        "schema_version": str(task.config.get("schema_version", task.config.get("version", "1.4"))),
        "version": package.get("version"),
        "description": package.get("description", ""),
        "authors": package.get("authors", []),
        "keywords": package.get("keywords", []),
        "source": task.config.get("source"),
        "metadata": task.section("metadata"),
        "solution_env": solution.get("env", {}),
        "build_timeout_s": float(env_cfg.get("build_timeout_sec", 600.0)),
        "docker_image": env_cfg.get("docker_image"),
        "network_mode": _baseline_policy(task, env_cfg)[0],
        "verifier_environment_mode": task.section("verifier").get("environment_mode"),
    }


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{loc}: {err.get('msg')}" if loc else str(err.get("msg"))

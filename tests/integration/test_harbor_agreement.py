"""Polar's Harbor loader agrees with Harbor's own, field by field, on every bundled task.

Harbor 0.25 (its `Task` model, in `.venv-harbor`, Python 3.12, built and cached by
scripts/setup_harbor_venv.sh) reads each task dir of examples/harbor; Polar's
loader (polar/tasks/harbor.py) reads the same dirs; every field Polar carries is
compared: name, instruction (canary stripped), agent and verifier timeouts,
verifier user and env, agent user, cpus, memory, storage, network mode, docker_image,
metadata, solution env, skills dir, MCP servers, GPUs, steps, artifacts and collect hooks,
and the verifier's mode (separate or shared, per step too) and whether it has its own image.
Harbor reads no compose file itself (it hands it to `docker compose up --wait`): compose's own
loader (docker-compose 1.29's `config`) is the referee of the services' healthchecks and
`depends_on`, which Polar reads into its own (polar/tasks/harbor_compose_ready.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from activities.evaluators.harbor import HarborConfig
from polar.tasks.harbor import load_harbor_tasks
from polar.tasks.harbor_compose_ready import parse_duration
from polar.tasks.harbor_toml import HarborTaskError, find_task_dirs
from polar.tasks.spec import TaskSpec, TaskStep, parse_size
from tests.support.paths import REPO

EXAMPLES = REPO / "examples" / "harbor"
FEATURES = REPO / "examples" / "harbor-features"
"""A task per Harbor feature (multi-step, ...): run by their own tests, not audited."""

HARBOR_VIEW = """
import json, sys
from harbor.models.task.artifacts import normalize_artifact_entries, with_convention_entry
from harbor.models.task.task import Task
from harbor.models.task.config import VerifierEnvironmentMode
from harbor.models.task.verifier_mode import (
    resolve_step_verifier_mode,
    resolve_task_verifier_mode,
    resolve_verifier_environment_definition,
)

SEPARATE = VerifierEnvironmentMode.SEPARATE

def own_image(c, t, s=None):
    # a separate verifier's own image (its docker_image, or tests/ built): bundled tests
    mode = resolve_task_verifier_mode(c) if s is None else resolve_step_verifier_mode(c, s)
    if mode != SEPARATE:
        return False
    return resolve_verifier_environment_definition(c, t.paths, s).bundled_tests

def art(a):
    return {
        "source": a.source if a.source.startswith("/") else "/" + a.source,
        "destination": a.destination,
        "exclude": list(a.exclude),
        "service": None if a.service in (None, "main") else a.service,
    }

def hook(h):
    return {
        "command": h.command,
        "service": None if h.service == "main" else h.service,
        "timeout_s": float(h.timeout_sec),
        "user": None if h.user is None else str(h.user),
    }

out = []
for d in sys.argv[1:]:
    t = Task(d)
    c = t.config
    e = c.environment
    declared = bool(c.artifacts or c.verifier.collect) or any(
        s.artifacts or s.verifier.collect for s in c.steps or []
    )
    task_artifacts = with_convention_entry(c.artifacts, convention_source="/logs/artifacts")
    out.append({
        "name": t.name,
        "instruction": t.instruction,
        "agent_timeout_s": c.agent.timeout_sec,
        "verifier_timeout_s": c.verifier.timeout_sec,
        "verifier_user": None if c.verifier.user is None else str(c.verifier.user),
        "agent_user": None if c.agent.user is None else str(c.agent.user),
        "gpus": e.gpus or 0,
        "gpu_types": (e.gpu_types or []) if e.gpus else [],
        "verifier_env": c.verifier.env,
        "cpus": e.cpus,
        "memory_mb": e.memory_mb,
        "storage_mb": e.storage_mb,
        "network_mode": e.network_mode.value,
        "docker_image": e.docker_image,
        "metadata": c.metadata,
        "solution_env": c.solution.env,
        "steps": [
            {
                "name": s.name,
                "instruction": t.step_instruction(s.name),
                "agent_timeout_s": s.agent.timeout_sec or c.agent.timeout_sec,
                # harbor/trial/multi_step.py `_step_agent_user`: the step's, else [agent]'s
                "agent_user": None if (u := s.agent.user or c.agent.user) is None else str(u),
                "verifier_timeout_s": s.verifier.timeout_sec,
                "verifier_env": {**c.verifier.env, **s.verifier.env},
                "min_reward": s.min_reward,
                "separate_verifier": resolve_step_verifier_mode(c, s) == SEPARATE,
                "verifier_own_image": own_image(c, t, s),
                "artifacts": [art(a) for a in normalize_artifact_entries(s.artifacts)],
                "collect": [hook(h) for h in s.verifier.collect],
            }
            for s in c.steps or []
        ],
        "step_reward": (c.multi_step_reward_strategy or "mean") if c.steps else None,
        "skills_dir": e.skills_dir or None,
        "mcp_servers": [s.model_dump(mode="json") for s in e.mcp_servers],
        # Harbor always collects its /logs/artifacts; Polar where the task declares any
        "artifacts": [art(a) for a in task_artifacts] if declared else [],
        "collect": [hook(h) for h in c.verifier.collect],
        "separate_verifier": resolve_task_verifier_mode(c) == SEPARATE,
        "verifier_own_image": own_image(c, t),
    })
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def harbor_python() -> Path:
    """.venv-harbor's python, built (cached) by scripts/setup_harbor_venv.sh."""
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup_harbor_venv.sh")],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"setup_harbor_venv failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def polar_view(spec: TaskSpec) -> dict[str, Any]:
    """The same fields, read back from Polar's TaskSpec."""
    meta, verifier, rt = spec.metadata["harbor"], HarborConfig.of(spec.evaluator), spec.runtime
    compose_env = meta.get("compose_env", {})

    def mb(size: str | None) -> int | None:
        return None if size is None else parse_size(size) >> 20

    return {
        "name": meta["name"],
        "instruction": spec.instruction,
        "agent_timeout_s": spec.timeouts.harness_s,
        "verifier_timeout_s": verifier.timeout_s,
        "verifier_user": verifier.user,
        "agent_user": rt.harness_user,
        "gpus": rt.gpus,
        "gpu_types": rt.gpu_types,
        # compose's `main` environment is the container's, not [verifier].env
        "verifier_env": {k: v for k, v in verifier.env.items() if k not in compose_env},
        "cpus": rt.cpus,
        "memory_mb": mb(rt.memory),
        "storage_mb": mb(rt.disk),
        "network_mode": meta["network_mode"],
        "docker_image": meta["docker_image"],
        "metadata": meta["metadata"],
        "solution_env": meta["solution_env"],
        "skills_dir": spec.harness.skills_dir,
        # a stdio server's `url` is left out of Polar's JSON; Harbor's dump has it, None
        "mcp_servers": [
            {"url": None, **s.model_dump(mode="json")} for s in spec.harness.mcp_servers
        ],
        "steps": [_step_view(step, rt.harness_user) for step in spec.steps],
        "step_reward": spec.step_reward if spec.steps else None,
        "artifacts": [a.model_dump(mode="json") for a in rt.collect.artifacts],
        "collect": [c.model_dump(mode="json") for c in rt.collect.commands],
        "separate_verifier": not verifier.workspace_changes,
        "verifier_own_image": verifier.image is not None,
    }


def _step_view(step: TaskStep, task_user: str | None) -> dict[str, Any]:
    assert step.evaluator is not None
    verifier = HarborConfig.of(step.evaluator)
    return {
        "name": step.name,
        "instruction": step.instruction,
        "agent_timeout_s": step.harness_s,
        "agent_user": step.harness_user or task_user,
        "verifier_timeout_s": verifier.timeout_s,
        "verifier_env": verifier.env,
        "min_reward": step.min_reward,
        "separate_verifier": not verifier.workspace_changes,
        "verifier_own_image": verifier.image is not None,
        "artifacts": [a.model_dump(mode="json") for a in step.collect.artifacts],
        "collect": [c.model_dump(mode="json") for c in step.collect.commands],
    }


# Polar's own defaults where Harbor leaves a resource unset (None: the provider's default)
POLAR_DEFAULTS = {"cpus": 2.0, "memory_mb": 4096, "storage_mb": 10240}


def test_polar_reads_every_bundled_task_as_harbor_does(harbor_python: Path) -> None:
    _agree(harbor_python, EXAMPLES)
    _agree(harbor_python, FEATURES)


def test_gpus_are_read_as_harbor_reads_them(harbor_python: Path, tmp_path: Path) -> None:
    """A GPU task (not bundled: no worker of the suite's declares GPUs, so its sessions are
    refused at submit) and a uid as the agent user, read by both loaders."""
    for name, lines in (
        ("gpu-typed", 'gpus = 2\ngpu_types = ["H100", "A100"]'),
        ("gpu-any", "gpus = 1"),
    ):
        task = Path(shutil.copytree(EXAMPLES / "hello-file", tmp_path / name))
        toml = task / "task.toml"
        text = toml.read_text().replace("[environment]\n", f"[environment]\n{lines}\n", 1)
        toml.write_text(text.replace("[agent]\n", "[agent]\nuser = 1234\n", 1))
    _agree(harbor_python, tmp_path)


def test_artifacts_and_collect_hooks_are_read_as_harbor_reads_them(
    harbor_python: Path, tmp_path: Path
) -> None:
    """A step's own artifacts and hooks (with a uid), a compose sidecar's, a relative source
    and the task's own convention entry, read by both loaders."""
    steps = Path(shutil.copytree(FEATURES / "two-step-notes", tmp_path / "steps"))
    toml = steps / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            '[[steps]]\nname = "extend"',
            '[[steps]]\nname = "extend"\nartifacts = ["/tmp/extend.log"]\n\n'
            '[[steps.verifier.collect]]\ncommand = "date > /tmp/extend.log"\nuser = 1000',
        )
    )
    lookup = Path(shutil.copytree(FEATURES / "compose-lookup", tmp_path / "lookup"))
    toml = lookup / "task.toml"
    toml.write_text(
        'artifacts = [{ source = "/srv", service = "lookup", destination = "srv" }]\n'
        + toml.read_text()
        + '\n[[verifier.collect]]\nservice = "lookup"\ncommand = "ls"\ntimeout_sec = 5\n'
    )
    report = Path(shutil.copytree(FEATURES / "artifact-report", tmp_path / "report"))
    toml = report / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            '"/srv/report/summary.txt",',
            '"srv/report/summary.txt", { source = "/logs/artifacts", exclude = ["*.bin"] },',
        )
    )
    _agree(harbor_python, tmp_path)


def test_the_verifiers_mode_and_image_are_read_as_harbor_reads_them(
    harbor_python: Path, tmp_path: Path
) -> None:
    """Separate by `environment_mode` (the task's, a step's own shared over it), by a
    `[verifier.environment]` with a `docker_image` or with tests/Dockerfile, or neither."""
    steps = Path(shutil.copytree(FEATURES / "two-step-notes", tmp_path / "steps"))
    toml = steps / "task.toml"
    text = toml.read_text().replace("[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n')
    parts = text.split("[[steps]]")
    parts[1] = parts[1].rstrip("\n") + '\n[steps.verifier]\nenvironment_mode = "shared"\n\n'
    toml.write_text("[[steps]]".join(parts))
    image = Path(shutil.copytree(EXAMPLES / "hello-file", tmp_path / "image"))
    toml = image / "task.toml"
    toml.write_text(toml.read_text() + '\n[verifier.environment]\ndocker_image = "grader:1"\n')
    mode_only = Path(shutil.copytree(EXAMPLES / "hello-file", tmp_path / "mode-only"))
    toml = mode_only / "task.toml"
    toml.write_text(
        toml.read_text().replace("[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n')
    )
    shutil.copytree(FEATURES / "separate-verifier", tmp_path / "bundled")
    own = Path(shutil.copytree(FEATURES / "two-step-notes", tmp_path / "step-own"))
    (own / "steps" / "extend" / "tests" / "Dockerfile").write_text("FROM polar/runtime:py311\n")
    toml = own / "task.toml"  # the second step's own separate verifier, its own image
    toml.write_text(toml.read_text() + "\n[steps.verifier.environment]\ncpus = 1\n")
    _agree(harbor_python, tmp_path)


def _agree(harbor_python: Path, path: Path) -> None:
    """Every task dir under `path` read by harbor 0.25 and by Polar: every field the same."""
    dirs = find_task_dirs(path)
    specs = {s.metadata["harbor"]["dir"]: s for s in load_harbor_tasks(path)}
    proc = subprocess.run(
        [str(harbor_python), "-c", HARBOR_VIEW, *map(str, dirs)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    theirs = json.loads(proc.stdout)
    assert len(theirs) == len(dirs) >= 2
    for d, harbor in zip(dirs, theirs, strict=True):
        ours = polar_view(specs[str(d.resolve())])
        for field, value in harbor.items():
            if value is None and field in POLAR_DEFAULTS:
                assert ours[field] == POLAR_DEFAULTS[field], (d.name, field)
                continue
            assert ours[field] == value, (d.name, field, ours[field], value)


COMPOSE = """services:
  main:
    image: polar/runtime:py311
    depends_on:
      db: {condition: service_healthy}
      init: {condition: service_completed_successfully}
  db:
    image: polar/runtime:py311
    depends_on: [init]
    healthcheck:
      test: ["CMD", "pg_isready", "-q"]
      interval: 1m30s
      timeout: 500ms
      retries: 5
      start_period: 1.5s
  init:
    image: polar/runtime:py311
    healthcheck: {disable: true}
  web:
    image: polar/runtime:py311
    depends_on: {db: {condition: service_healthy}}
    healthcheck: {test: curl -f localhost, interval: 2s}
"""
DOCKER_DEFAULTS = {"interval": 30.0, "timeout": 30.0, "retries": 3, "start_period": 0.0}


def _compose_config(path: Path) -> subprocess.CompletedProcess[str]:
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.skip("docker-compose (compose's own loader) is not installed")
    return subprocess.run(
        [compose, "-f", str(path), "config"], capture_output=True, text=True, timeout=60
    )


def test_compose_readiness_is_read_as_compose_reads_it(tmp_path: Path) -> None:
    """slow-service's compose file and a richer one: each service's healthcheck (its command,
    durations in seconds, retries, docker's defaults where unset) and `depends_on` (the
    short form as `service_started`), and `main`'s, as `docker-compose config` has them; a
    cycle and an unknown condition refused by both."""
    import yaml  # type: ignore[import-untyped]

    rich = Path(shutil.copytree(FEATURES / "compose-lookup", tmp_path / "rich"))
    (rich / "environment" / "docker-compose.yaml").write_text(COMPOSE)
    for task in (FEATURES / "slow-service", rich):
        compose = task / "environment" / "docker-compose.yaml"
        data = yaml.safe_load(compose.read_text())
        data["services"]["main"]["image"] = "polar/runtime:py311"  # Harbor's base file gives it
        own = tmp_path / f"{task.name}.yaml"
        own.write_text(yaml.safe_dump(data))
        proc = _compose_config(own)
        assert proc.returncode == 0, proc.stderr
        theirs = yaml.safe_load(proc.stdout)["services"]
        (spec,) = load_harbor_tasks(task)
        deps = {k: v["condition"] for k, v in theirs["main"].get("depends_on", {}).items()}
        assert spec.runtime.depends_on == deps
        for sidecar in spec.runtime.sidecars:
            service = theirs[sidecar.name]
            deps = {k: v["condition"] for k, v in service.get("depends_on", {}).items()}
            assert sidecar.depends_on == deps, sidecar.name
            check = service.get("healthcheck", {"test": ["NONE"]})
            if check["test"] == ["NONE"]:
                assert sidecar.healthcheck is None, sidecar.name
                continue
            assert sidecar.healthcheck is not None, sidecar.name
            test = check["test"]
            assert sidecar.healthcheck.test() == (
                ["CMD-SHELL", test] if isinstance(test, str) else test
            )
            for key, default in DOCKER_DEFAULTS.items():
                value = check.get(key)
                want = (
                    default
                    if value is None
                    else value
                    if key == "retries"
                    else parse_duration(value)
                )
                ours = getattr(sidecar.healthcheck, key if key == "retries" else f"{key}_s")
                assert ours == pytest.approx(want), (sidecar.name, key)
    for bad in ("service_done", "cycle"):
        text = COMPOSE.replace("service_completed_successfully", bad)
        if bad == "cycle":
            text = COMPOSE.replace("    healthcheck: {disable: true}", "    depends_on: [web]")
        (rich / "environment" / "docker-compose.yaml").write_text(text)
        (tmp_path / "bad.yaml").write_text(text)
        assert _compose_config(tmp_path / "bad.yaml").returncode != 0, bad
        with pytest.raises(HarborTaskError):
            load_harbor_tasks(rich)

"""Harbor's separate verifier: when a verify pass is one, and its environment, resolved as
harbor 0.25 resolves them (`harbor.models.task.verifier_mode`).

A pass is separate when its `environment_mode` says so, or its verifier has an
`environment` (a step's own settings first, then the task's; else Harbor's default,
shared). Its environment, the first that applies: the step's `[steps.verifier.environment]`
`docker_image`, a Dockerfile in the step's `tests/`, the task's
`[verifier.environment].docker_image`, a Dockerfile in the task's `tests/` (each such folder
built like environment/, with its tests bundled, and its `docker-compose.yaml` services as
the verifier's own sidecars), else the task's own environment (`None` image: its image and
its sidecars, as the task's runtime has them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polar.tasks.harbor_compose import COMPOSE_FILE, read_compose
from polar.tasks.harbor_environment import (
    IMAGE_REPO,
    environment_hash,
    resolved_image_map,
    resources,
)
from polar.tasks.harbor_toml import HarborTask, HarborTaskError
from polar.tasks.runtime_spec import Sidecar
from polar.tasks.sidecar_spec import Condition

__all__ = ["SeparateVerifier", "separate_mode", "separate_verifier", "separate_verifiers"]


@dataclass(frozen=True)
class SeparateVerifier:
    """A separate verifier's environment: its own image (None: the task's), the folder it is
    built from (None: prebuilt, or the task's), its compose services and `main`'s env."""

    image: str | None = None
    build_dir: Path | None = None
    source: str = "verifier.environment"
    """the task.toml field (or file) its image comes from, for messages"""
    sidecars: list[Sidecar] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    """its environment table's `cpus`, `memory`, `disk` (RuntimeSpec's), those it sets"""
    depends_on: dict[str, Condition] = field(default_factory=dict)
    """what its `main` waits for among its services (RuntimeSpec.depends_on)"""


def _mode(verifier: dict[str, Any]) -> str | None:
    mode = verifier.get("environment_mode")
    if mode is not None:
        return str(mode)
    return "separate" if verifier.get("environment") is not None else None


def separate_mode(task: HarborTask, step_verifier: dict[str, Any] | None = None) -> bool:
    """Whether the task's verify pass (or a step's, given its `[steps.verifier]`) is
    separate: the step's own mode, else the task's, else shared."""
    own = _mode(step_verifier) if step_verifier is not None else None
    return (own or _mode(task.section("verifier")) or "shared") == "separate"


def separate_verifier(
    task: HarborTask,
    image_map: Mapping[str, str] | None = None,
    step: str | None = None,
    step_verifier: dict[str, Any] | None = None,
) -> SeparateVerifier | None:
    """The environment of the task's (or step `step`'s) separate verifier; None where the
    pass is shared (HarborTaskError naming what cannot be run)."""
    if not separate_mode(task, step_verifier):
        return None
    candidates = []
    if step is not None:
        where = f"steps.{step}.verifier.environment"
        candidates.append(
            ((step_verifier or {}).get("environment"), task.dir / "steps" / step / "tests", where)
        )
    candidates.append(
        (task.section("verifier").get("environment"), task.tests_dir, "verifier.environment")
    )
    for env, _, where in candidates:
        if env is not None and not isinstance(env, dict):
            raise HarborTaskError(task.name, where, "must be a table")
    # its resources: the effective table's (the step's, else the task's), as Harbor's
    table, where = next(((e, w) for e, _, w in candidates if e is not None), ({}, ""))
    own = resources(task, table, where) if table else {}
    for env, folder, where in candidates:
        if env and env.get("docker_image"):
            image = str(env["docker_image"])
            mapped = resolved_image_map(task, image_map).get(image, image)
            return SeparateVerifier(mapped, None, f"{where}.docker_image", resources=own)
        rel = folder.relative_to(task.dir).as_posix()
        if (folder / "Dockerfile").is_file():
            compose = read_compose(task, image_map, folder)
            image = f"{IMAGE_REPO}:{environment_hash(task, image_map, folder)[:20]}"
            return SeparateVerifier(
                image,
                folder,
                f"{rel}/Dockerfile",
                compose.sidecars,
                compose.main_env,
                own,
                compose.main_depends_on,
            )
        if (folder / COMPOSE_FILE).is_file():
            raise HarborTaskError(
                task.name,
                f"{rel}/{COMPOSE_FILE}",
                f"a separate verifier's compose file without {rel}/Dockerfile: its `main` "
                "service is built from that Dockerfile (as in Harbor), and there is none",
            )
    return SeparateVerifier(resources=own)


def separate_verifiers(
    task: HarborTask, image_map: Mapping[str, str] | None = None
) -> list[SeparateVerifier]:
    """Every separate verifier of the task (its own, and each step's) that has an image of
    its own: what `ensure_images` must find or build."""
    found = [separate_verifier(task, image_map)]
    for step in task.config.get("steps") or []:
        if isinstance(step, dict) and isinstance(step.get("name"), str):
            verifier = step.get("verifier") if isinstance(step.get("verifier"), dict) else {}
            found.append(separate_verifier(task, image_map, step["name"], verifier))
    unique = {v.image: v for v in found if v is not None and v.image is not None}
    return list(unique.values())

"""A Harbor task's `environment/docker-compose.yaml` → the session's sidecars.

Harbor runs a compose environment: its `main` service (the task's image, where the agent
runs) and the task's other services beside it, which the agent and the verifier reach by
their names. Polar runs each other service as a sidecar of the session's container
(`RuntimeSpec.sidecars`; activities/runtimes/kinds/docker_sidecars.py, podman_sidecars.py):
on the session's own private network (on podman: a namespace with only a loopback, shared
with the session's container), which has no way out and no host, torn down with the session,
and made afresh for the grading runtime. `main`'s `environment` is given to the agent and to
the verifier, as compose gives it to every exec in `main`.

Read per service: `image` (through the image map), `command` and `entrypoint` (a string is
split as a shell would), `environment` (a table or `NAME=value` lines), `working_dir`,
`healthcheck` and `depends_on` (polar/tasks/harbor_compose_ready.py: the services start in
`depends_on` order, each waiting for its dependencies' conditions, and the session's container
once every service is ready, as `docker compose up --wait` has it; `main`'s own `depends_on`
is the runtime's); `expose` is accepted (every port is open on the session's network). A
sidecar's `build` (a context folder of the task, or a table of `context` and `dockerfile`)
is built offline like environment/
(polar/tasks/harbor_images.py) and tagged by its content's hash; its `image`, if also
given, is then only a name. Refused, naming the service and key: published `ports`,
`volumes`, `networks` and `network_mode`, a build context outside the task, build keys
other than `context` and `dockerfile`, and any other key.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar.tasks.harbor_compose_ready import compose_depends_on, compose_healthcheck
from polar.tasks.harbor_environment import IMAGE_REPO, environment_hash, resolved_image_map
from polar.tasks.harbor_toml import HarborTask, HarborTaskError
from polar.tasks.runtime_spec import Sidecar
from polar.tasks.sidecar_spec import Condition, check_dependencies

__all__ = ["COMPOSE_FILE", "Compose", "SidecarBuild", "read_compose"]

COMPOSE_FILE = "docker-compose.yaml"
"""The one compose file Harbor reads from `environment/`."""

_SIDECAR_KEYS = {
    "image",
    "build",
    "command",
    "entrypoint",
    "environment",
    "working_dir",
    "depends_on",
    "healthcheck",
}
_MAIN_KEYS = {"build", "image", "environment", "depends_on", "command", "healthcheck"}
_ACCEPTED = {"expose", "restart", "container_name"}
_REASONS = {
    "ports": "publishing a port on the host: a session's services are reachable from it alone",
    "volumes": "host volumes: a session's services share nothing with the host",
    "networks": "networks of the task's own: a session's services have the session's network",
    "network_mode": "a network mode: a session's services have the session's network",
}


@dataclass(frozen=True)
class SidecarBuild:
    """A sidecar built from the task's own files: its context folder and Dockerfile."""

    service: str
    image: str
    context: Path
    dockerfile: str = "Dockerfile"


@dataclass(frozen=True)
class Compose:
    """A compose file as Polar runs it: the sidecars, `main`'s environment and what `main`
    depends on, and the sidecars built from the task's own files."""

    sidecars: list[Sidecar]
    main_env: dict[str, str]
    main_depends_on: dict[str, Condition]
    builds: list[SidecarBuild]


def read_compose(
    task: HarborTask, image_map: Mapping[str, str] | None = None, folder: Path | None = None
) -> Compose:
    """The task's compose file (none: an empty Compose), from environment/ (or `folder`: a
    separate verifier's tests/): its sidecars, `main`'s environment and dependencies, and the
    sidecars built from the task's own files; HarborTaskError naming the service and key
    Polar cannot honour."""
    folder = task.environment_dir if folder is None else folder
    path = folder / COMPOSE_FILE
    if not path.is_file():
        return Compose([], {}, {}, [])
    import yaml  # type: ignore[import-untyped]  # the server install's (pyproject)

    where = f"{folder.relative_to(task.dir).as_posix()}/{COMPOSE_FILE}"
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise HarborTaskError(task.name, where, f"cannot read it: {exc}") from None
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict):
        raise HarborTaskError(task.name, where, "has no `services` table")
    mapping = resolved_image_map(task, image_map)
    sidecars, main_env, main_deps, builds = [], {}, {}, []
    for name, service in services.items():
        here = f"{where}: services.{name}"
        if not isinstance(service, dict):
            raise HarborTaskError(task.name, here, "must be a table")
        if name == "main":
            _check_keys(task, here, service, _MAIN_KEYS)
            main_env = _env(task, here, service.get("environment"))
            main_deps = compose_depends_on(task, here, service.get("depends_on"))
            if compose_healthcheck(task, here, service.get("healthcheck")) is not None:
                raise HarborTaskError(
                    task.name,
                    f"{here}.healthcheck",
                    "not supported on main: use [environment.healthcheck] in task.toml",
                )
            continue
        build = None
        if service.get("build") is not None:
            build = _build_of(task, here, str(name), folder, service["build"], image_map)
            builds.append(build)
        sidecars.append(_sidecar(task, here, str(name), service, mapping, build))
    try:
        check_dependencies(sidecars, main_deps)
    except ValueError as exc:
        raise HarborTaskError(task.name, f"{where}: depends_on", str(exc)) from None
    return Compose(sidecars, main_env, main_deps, builds)


def _build_of(
    task: HarborTask,
    where: str,
    name: str,
    folder: Path,
    value: Any,
    image_map: Mapping[str, str] | None,
) -> SidecarBuild:
    """A sidecar's `build`: its context within the task, its Dockerfile, its image's tag."""
    if isinstance(value, str):
        context, dockerfile = value, "Dockerfile"
    elif isinstance(value, dict):
        unknown = sorted(set(value) - {"context", "dockerfile"})
        if unknown:
            raise HarborTaskError(
                task.name,
                f"{where}.build.{unknown[0]}",
                "not supported: a sidecar is built from its context and Dockerfile alone",
            )
        context, dockerfile = (
            str(value.get("context", ".")),
            str(value.get("dockerfile", "Dockerfile")),
        )
    else:
        raise HarborTaskError(task.name, f"{where}.build", "must be a path or a table")
    root = task.dir.resolve()
    path = (folder / context).resolve()
    file = (path / dockerfile).resolve()
    if not path.is_relative_to(root) or not file.is_relative_to(path) or not file.is_file():
        raise HarborTaskError(
            task.name,
            f"{where}.build",
            f"{context!r} (Dockerfile {dockerfile!r}): must be a folder of the task holding "
            "that Dockerfile",
        )
    digest = environment_hash(task, image_map, path, dockerfile)[:20]
    return SidecarBuild(name, f"{IMAGE_REPO}:{digest}", path, dockerfile)


def _sidecar(
    task: HarborTask,
    where: str,
    name: str,
    service: dict[str, Any],
    mapping: Mapping[str, str],
    build: SidecarBuild | None,
) -> Sidecar:
    _check_keys(task, where, service, _SIDECAR_KEYS)
    image = service.get("image")
    if build is not None:
        image = build.image
    elif not isinstance(image, str) or not image:
        raise HarborTaskError(task.name, f"{where}.image", "missing: a sidecar runs an image")
    else:
        image = mapping.get(image, image)
    workdir = service.get("working_dir")
    return Sidecar(
        name=name,
        image=image,
        command=_argv(task, f"{where}.command", service.get("command")),
        entrypoint=_argv(task, f"{where}.entrypoint", service.get("entrypoint")),
        env=_env(task, where, service.get("environment")),
        workdir=None if workdir is None else str(workdir),
        healthcheck=compose_healthcheck(task, where, service.get("healthcheck")),
        depends_on=compose_depends_on(task, where, service.get("depends_on")),
    )


def _check_keys(task: HarborTask, where: str, service: dict[str, Any], keys: set[str]) -> None:
    for key in service:
        if key in keys or key in _ACCEPTED:
            continue
        reason = _REASONS.get(key, f"a compose key Polar does not run (it runs {sorted(keys)})")
        raise HarborTaskError(task.name, f"{where}.{key}", f"not supported: {reason}")


def _argv(task: HarborTask, where: str, value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return [str(v) for v in value]
    raise HarborTaskError(task.name, where, "must be a string or a list of strings")


def _env(task: HarborTask, where: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return dict(v.split("=", 1) if "=" in v else (v, "") for v in value)
    raise HarborTaskError(task.name, f"{where}.environment", "must be a table or NAME=value list")

"""A Harbor task's `artifacts` and `[[verifier.collect]]` (task-level and per step) →
`CollectSpec` (polar/tasks/collect_spec.py): what the run copies out of the runtime after the
harness, and the commands it runs first.

As harbor 0.25 reads them (models/task/config.py `ArtifactConfig`, `VerifierCollectConfig`;
models/task/artifacts.py): an artifact is a path string or a table `{source, destination,
exclude, service}`; a source has no `..` part (a sidecar's is absolute; a relative one of
`main` is taken from `/`, as `docker cp` takes it), a destination is relative, has no `..`
part and is not `manifest.json`; a collect hook is `{command, service = "main", timeout_sec
= 60, user}`. Where the task declares any of them, Harbor's convention folder
`/logs/artifacts` (the agent's own publish dir, which Harbor always collects from `main`) is
collected first unless an entry names it. A service is `main` or one of the task's compose
services (else HarborTaskError, as Harbor refuses services no compose file defines).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from polar.tasks.collect_spec import MAIN, ArtifactPath, CollectCommand, CollectSpec, host_name
from polar.tasks.harbor_toml import HarborTask, HarborTaskError, first_error

__all__ = ["CONVENTION_DIR", "declares_collection", "harbor_collect", "task_collect"]

CONVENTION_DIR = "/logs/artifacts"
"""Harbor's agent publish dir on Linux (`EnvironmentPaths.artifacts_dir`)."""
_ARTIFACT_KEYS = {"source", "destination", "exclude", "service"}
_COLLECT_KEYS = {"command", "service", "timeout_sec", "user"}


def declares_collection(task: HarborTask) -> bool:
    """Whether the task, or any of its steps, has artifacts or collect hooks."""
    tables = [task.config, *(s for s in task.config.get("steps") or [] if isinstance(s, dict))]
    for table in tables:
        verifier = table.get("verifier") if isinstance(table.get("verifier"), dict) else {}
        if table.get("artifacts") or (verifier or {}).get("collect"):
            return True
    return False


def task_collect(task: HarborTask, services: set[str]) -> CollectSpec:
    """The task's own collection (`RuntimeSpec.collect`): its artifacts and hooks, after
    Harbor's convention dir where the task or a step declares any."""
    return harbor_collect(task, "", task.config, services, convention=declares_collection(task))


def harbor_collect(
    task: HarborTask,
    where: str,
    table: dict[str, Any],
    services: set[str],
    *,
    convention: bool,
) -> CollectSpec:
    """The CollectSpec of a task.toml table (the task's top level, or a `[[steps]]` entry,
    `where` naming it for errors: `""` or `steps.{name}.`); with `convention`, Harbor's
    `/logs/artifacts` first unless named."""
    verifier = table.get("verifier") or {}
    raw_artifacts = _array(task, f"{where}artifacts", table.get("artifacts"))
    raw_hooks = _array(task, f"{where}verifier.collect", verifier.get("collect"))
    artifacts = [
        _artifact(task, f"{where}artifacts[{i}]", entry, services)
        for i, entry in enumerate(raw_artifacts)
    ]
    commands = [
        _hook(task, f"{where}verifier.collect[{i}]", entry, services)
        for i, entry in enumerate(raw_hooks)
    ]
    if convention and not any(
        a.on == MAIN and host_name(a.source) == host_name(CONVENTION_DIR) for a in artifacts
    ):
        artifacts.insert(0, ArtifactPath(source=CONVENTION_DIR))
    try:
        return CollectSpec(commands=commands, artifacts=artifacts)
    except ValidationError as exc:
        raise HarborTaskError(task.name, f"{where}artifacts", first_error(exc)) from None


def _array(task: HarborTask, field: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise HarborTaskError(task.name, field, "must be an array")
    return value


def _service(task: HarborTask, field: str, value: Any, services: set[str]) -> str | None:
    if value is None or value == MAIN:
        return None
    if not isinstance(value, str) or value not in services:
        known = ", ".join(sorted(services)) or "none: the task has no docker-compose.yaml"
        raise HarborTaskError(
            task.name,
            field,
            f"{value!r} is not a compose service of the task (its services: {known})",
        )
    return value


def _artifact(task: HarborTask, field: str, entry: Any, services: set[str]) -> ArtifactPath:
    if isinstance(entry, str):
        entry = {"source": entry}
    if not isinstance(entry, dict):
        raise HarborTaskError(task.name, field, "a path, or a table {source, destination, ...}")
    _known(task, field, entry, _ARTIFACT_KEYS, "artifacts")
    source = entry.get("source")
    service = _service(task, f"{field}.service", entry.get("service"), services)
    if not isinstance(source, str) or not source:
        raise HarborTaskError(task.name, f"{field}.source", "missing: a path in the container")
    if not source.startswith("/"):
        if service is not None:
            raise HarborTaskError(
                task.name, f"{field}.source", f"{source!r}: a sidecar's source is absolute"
            )
        source = "/" + source  # from the root, as `docker cp` takes a relative path
    exclude = entry.get("exclude") or []
    if not isinstance(exclude, list) or not all(isinstance(p, str) for p in exclude):
        raise HarborTaskError(task.name, f"{field}.exclude", "must be an array of patterns")
    destination = entry.get("destination") or None
    try:
        return ArtifactPath(
            source=source, destination=destination, exclude=exclude, service=service
        )
    except ValidationError as exc:
        raise HarborTaskError(task.name, field, first_error(exc)) from None


def _known(task: HarborTask, field: str, entry: dict[str, Any], keys: Any, what: str) -> None:
    """Every key of `entry` is one of Harbor's `what`; else refused, naming the first."""
    unknown = sorted(set(entry) - set(keys))
    if unknown:
        raise HarborTaskError(task.name, f"{field}.{unknown[0]}", f"not a field of Harbor's {what}")


def _hook(task: HarborTask, field: str, entry: Any, services: set[str]) -> CollectCommand:
    if not isinstance(entry, dict):
        raise HarborTaskError(task.name, field, "a table {command, service, timeout_sec, user}")
    _known(task, field, entry, _COLLECT_KEYS, "[[verifier.collect]]")
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise HarborTaskError(task.name, f"{field}.command", "missing: a shell command")
    timeout = entry.get("timeout_sec", 60.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise HarborTaskError(task.name, f"{field}.timeout_sec", f"{timeout!r}: seconds")
    user = entry.get("user")
    if isinstance(user, bool) or (user is not None and not isinstance(user, str | int)):
        raise HarborTaskError(task.name, f"{field}.user", f"{user!r}: a user name or a uid")
    try:
        return CollectCommand(
            command=command,
            service=_service(task, f"{field}.service", entry.get("service"), services),
            timeout_s=float(timeout),
            user=None if user is None else str(user),
        )
    except ValidationError as exc:
        raise HarborTaskError(task.name, field, first_error(exc)) from None

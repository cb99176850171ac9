"""Harbor environments as local images: built offline, cached by content, checked at submit.

`ensure_images(path)` runs where tasks are loaded and submitted (`polar tasks load`,
`polar submit DIR`), on the worker host's engine (`DOCKER_HOST`), never in a
session's run stage:

* `environment/Dockerfile` is built with the local engine, with no network
  (`network_mode=none`) and no pull, as `polar/harbor-env:{hash}`, the hash of
  the environment dir's content and of the image map entries its FROM lines use
  (polar/tasks/harbor_environment.py: `environment_hash`). An image of that tag already
  there is the cache: nothing is built again.
* a prebuilt `[environment].docker_image` is used as is (through the image map).
* a separate verifier's own image (`[verifier.environment].docker_image`, or a
  `tests/Dockerfile`, built the same way with `tests/` as its context) likewise.
* an image a task needs (its base image or its docker_image) that the engine
  does not have fails here, naming it and how to map it to a local one: the
  task's `[metadata.polar.image_map]` in task.toml, or the deployment's
  `POLAR_HARBOR_IMAGE_MAP` (JSON object, image name -> local image).
"""

from __future__ import annotations

import functools
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar.tasks.harbor_compose import COMPOSE_FILE, read_compose
from polar.tasks.harbor_environment import base_images, environment_image, resolved_image_map
from polar.tasks.harbor_separate import SeparateVerifier, separate_verifiers
from polar.tasks.harbor_toml import HarborTask, HarborTaskError, find_task_dirs, read_harbor_task

__all__ = ["BuiltImage", "ensure_image", "ensure_images"]

LABEL_TASK = "polar.harbor.task"
MAP_HINT = (
    "map it to a local image: [metadata.polar.image_map] in the task's task.toml "
    '(e.g. "{image}" = "polar/runtime:py311"), or the deployment\'s POLAR_HARBOR_IMAGE_MAP '
    "(a JSON object of image name -> local image)"
)


@dataclass(frozen=True)
class BuiltImage:
    """A task's image and how it came to be there."""

    task: str
    image: str
    how: str  # "prebuilt" | "cached" | "built"
    seconds: float = 0.0


def _has_image(client: Any, name: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(name)
    except ImageNotFound:
        return False
    return True


def _missing(task: HarborTask, field: str, image: str) -> HarborTaskError:
    return HarborTaskError(
        task.name,
        field,
        f"image {image!r} is not on this host's engine (no registry is used): "
        + MAP_HINT.format(image=image),
    )


def _mapped_dockerfile(text: str, mapping: Mapping[str, str]) -> str:
    """The Dockerfile with each image the map names, in a FROM line or a `COPY --from=`,
    replaced by its local image."""

    def swap(match: re.Match[str]) -> str:
        return match.group(1) + mapping.get(match.group(2), match.group(2))

    text = re.sub(r"(?im)^(\s*FROM\s+(?:--\S+\s+)*)(\S+)", swap, text)
    return re.sub(r"(?im)^(\s*COPY\s+(?:--\S+\s+)*?--from=)(\S+)", swap, text)


NO_NETWORK = re.compile(
    r"no such host|Temporary failure in name resolution|Could not resolve|"
    r"Network is unreachable|Failed to establish a new connection|pull access denied|"
    r"failed to resolve source metadata|getaddrinfo",
    re.IGNORECASE,
)
"""What a build step that tried to reach the network prints."""


def _build_failure(task: HarborTask, exc: Any, field: str) -> HarborTaskError:
    """A failed build as the task's error: the log's tail, and where a step tried the
    network, that builds have none and which step it was."""
    log = "".join(str(c.get("stream", "")) for c in exc.build_log)
    steps = re.findall(r"^Step \d+/\d+ : (.*)$", log, re.MULTILINE)
    why = f"build failed: {exc}"
    if NO_NETWORK.search(log) or NO_NETWORK.search(str(exc)):
        step = steps[-1] if steps else "a step"
        why = (
            f"build failed: builds have no network (network_mode=none, no pull), and "
            f"{step!r} needed it; bake what it fetches into a local base image and map it "
            f"({MAP_HINT.format(image='<image>')}); {exc}"
        )
    return HarborTaskError(task.name, field, f"{why}\n{log[-2000:]}")


def ensure_image(
    task: HarborTask,
    client: Any,
    image_map: Mapping[str, str] | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> BuiltImage:
    """The task's image present on `client`'s engine: prebuilt, cached or built now
    (HarborTaskError naming a missing image, or a failed build with its log's tail); a
    separate verifier's own images too (polar/tasks/harbor_separate.py)."""
    _ensure_services(task, client, image_map, log, None)
    built = _ensure(task, client, image_map, log, None)
    for verifier in separate_verifiers(task, image_map):  # the separate verifiers' own
        _ensure_services(task, client, image_map, log, verifier)
        _ensure(task, client, image_map, log, verifier)
    return built


def _ensure_services(
    task: HarborTask,
    client: Any,
    image_map: Mapping[str, str] | None,
    log: Callable[[str], None],
    verifier: SeparateVerifier | None,
) -> None:
    """A compose file's sidecar images (the task's, or a separate verifier's): one built
    from the task's files is built now if not cached; any other must be on the engine."""
    folder = None if verifier is None else verifier.build_dir
    if verifier is not None and folder is None:
        return  # a prebuilt verifier image, or the task's own environment: no services
    where = f"{(folder or task.environment_dir).relative_to(task.dir).as_posix()}/{COMPOSE_FILE}"
    compose = read_compose(task, image_map, folder)  # one read of the file
    sidecars, builds = compose.sidecars, {b.service: b for b in compose.builds}
    mapping = resolved_image_map(task, image_map)
    for sidecar in sidecars:
        build = builds.get(sidecar.name)
        if _has_image(client, sidecar.image):
            continue
        field = f"{where}: services.{sidecar.name}"
        if build is None:
            raise _missing(task, f"{field}.image", sidecar.image)
        for base in base_images(task, build.context, build.dockerfile):
            if not _has_image(client, mapping.get(base, base)):
                raise _missing(task, f"{field}.build FROM/COPY --from", mapping.get(base, base))
        log(f"building {sidecar.image} (service {sidecar.name}) for {task.name}")
        _build(
            task, client, build.context, sidecar.image, mapping, f"{field}.build", build.dockerfile
        )


def _ensure(
    task: HarborTask,
    client: Any,
    image_map: Mapping[str, str] | None,
    log: Callable[[str], None],
    verifier: SeparateVerifier | None,
) -> BuiltImage:
    """The agent's image (environment/), or a separate verifier's (prebuilt, or its tests/)."""
    if verifier is not None:
        image, root = verifier.image or "", verifier.build_dir
        prebuilt = verifier.build_dir is None
        prebuilt_field = dockerfile_field = verifier.source
    else:
        image, root = environment_image(task, image_map), None
        prebuilt = bool(task.section("environment").get("docker_image"))
        prebuilt_field, dockerfile_field = "environment.docker_image", "environment/Dockerfile"
    if prebuilt:
        if not _has_image(client, image):
            raise _missing(task, prebuilt_field, image)
        _check_shell(task, client, image, prebuilt_field)
        return BuiltImage(task.name, image, "prebuilt")
    if _has_image(client, image):
        _check_shell(task, client, image, dockerfile_field)
        return BuiltImage(task.name, image, "cached")
    mapping = resolved_image_map(task, image_map)
    for base in base_images(task, root):
        if not _has_image(client, mapping.get(base, base)):
            raise _missing(task, f"{dockerfile_field} FROM/COPY --from", mapping.get(base, base))
    started = time.monotonic()
    log(f"building {image} for {task.name}")
    _build(task, client, root or task.environment_dir, image, mapping, dockerfile_field)
    _check_shell(task, client, image, dockerfile_field)
    return BuiltImage(task.name, image, "built", round(time.monotonic() - started, 1))


def _build(
    task: HarborTask,
    client: Any,
    root: Path,
    image: str,
    mapping: Mapping[str, str],
    field: str,
    dockerfile: str = "Dockerfile",
) -> None:
    """Build `root`'s `dockerfile` (its images mapped) as `image`, offline."""
    from docker.errors import BuildError

    timeout = float(task.section("environment").get("build_timeout_sec", 600.0))
    with tempfile.TemporaryDirectory(prefix="polar-harbor-env-") as tmp:
        context = Path(tmp) / "context"
        shutil.copytree(root, context, symlinks=True)
        file = context / dockerfile
        file.write_text(_mapped_dockerfile(file.read_text(), mapping))
        try:
            client.images.build(
                path=str(context),
                dockerfile=dockerfile,
                tag=image,
                labels={LABEL_TASK: task.name},
                network_mode="none",
                pull=False,
                rm=True,
                forcerm=True,
                timeout=int(timeout),
            )
        except BuildError as exc:
            raise _build_failure(task, exc, field) from exc


SHELL = "/bin/sh"


def _check_shell(task: HarborTask, client: Any, image: str, field: str) -> None:
    """HarborTaskError where `image` has no shell (`/bin/sh`), which a session's sandbox
    needs of a task's image (activities/runtimes/sandboxes/needs.py; it brings the rest):
    looked up in a container created from it, never started."""
    if _shell_of(client, client.images.get(image).id) is None:
        raise HarborTaskError(
            task.name,
            field,
            f"image {image!r} has no shell ({SHELL} is missing): Polar runs a task's commands "
            "and scripts with it, as Harbor does; build the environment on an image with one "
            "(debian, ubuntu, alpine, busybox)",
        )


@functools.lru_cache(maxsize=256)
def _shell_of(client: Any, image_id: str) -> str | None:
    """`/bin/sh` where the image (by id) has one, else None (cached per image id)."""
    from docker.errors import NotFound

    container = client.containers.create(image_id, command=[SHELL], network_disabled=True)
    try:
        container.get_archive(SHELL)
    except NotFound:
        return None
    finally:
        container.remove(force=True)
    return SHELL


def ensure_images(
    path: Path | str,
    *,
    image_map: Mapping[str, str] | None = None,
    client: Any = None,
    log: Callable[[str], None] = lambda _: None,
) -> list[BuiltImage]:
    """`ensure_image` for the task dir, or every task dir of the dataset, at `path`; a
    ValueError saying so where the docker package is not installed (the client install)."""
    if client is None:
        try:
            import docker
        except ImportError as exc:
            raise ValueError(
                "its environment image is built on this host's Docker engine, which needs "
                "polar-rollout[server] (docker not installed): pip install "
                "'polar-rollout[server]' (`polar tasks load --no-build` skips the build)"
            ) from exc
        client = docker.from_env()
    return [
        ensure_image(read_harbor_task(d), client, image_map, log)
        for d in find_task_dirs(Path(path))
    ]

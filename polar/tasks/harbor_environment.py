"""Harbor's [environment] as Polar's docker runtime: the image, its hash, workdir and resources."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from polar.tasks.harbor_toml import HarborTask, HarborTaskError, first_error
from polar.tasks.spec import RuntimeSpec

__all__ = [
    "IMAGE_REPO",
    "base_images",
    "check_environment",
    "environment_hash",
    "environment_image",
    "resolved_image_map",
    "resources",
    "runtime_spec",
]

IMAGE_REPO = "polar/harbor-env"
"""Images built from a task's environment/ are `{IMAGE_REPO}:{content hash}`."""


def environment_hash(
    task: HarborTask,
    image_map: Mapping[str, str] | None = None,
    root: Path | None = None,
    dockerfile: str = "Dockerfile",
) -> str:
    """The content hash of the task's environment/ (or `root`, another build context: a
    separate verifier's tests/) (paths, exec bits, bytes, link targets) and of the image map
    entries its Dockerfile's FROM lines use: the build cache key."""
    digest = hashlib.sha256()
    root = task.environment_dir if root is None else root
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"F {rel} {os.access(path, os.X_OK)}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    if dockerfile != "Dockerfile":  # another file of the same folder: another image
        digest.update(f"D {dockerfile}\0".encode())
    bases = base_images(task, root, dockerfile)
    used = {b: m for b, m in resolved_image_map(task, image_map).items() if b in bases}
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


def base_images(
    task: HarborTask, root: Path | None = None, dockerfile: str = "Dockerfile"
) -> list[str]:
    """The images the Dockerfile (of environment/, or of `root`) pulls in: its FROM lines'
    and its `COPY --from=` ones (build stages, stage indexes and `scratch` left out), in
    order."""
    path = (task.environment_dir if root is None else root) / dockerfile
    if not path.is_file():
        return []
    stages: set[str] = set()
    images: list[str] = []

    def pulled(name: str) -> None:
        if name not in stages and name != "scratch" and not name.isdigit() and name not in images:
            images.append(name)

    for line in _dockerfile_lines(path):
        words = line.split()
        if not words:
            continue
        instruction = words[0].upper()
        if instruction == "COPY":
            for word in words[1:]:
                if word.lower().startswith("--from="):
                    pulled(word.split("=", 1)[1])
            continue
        if instruction != "FROM":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if not args:
            continue
        pulled(args[0])
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


def check_environment(task: HarborTask, env_cfg: dict[str, Any], verifier: dict[str, Any]) -> None:
    if str(env_cfg.get("os", "linux")).lower() != "linux":
        raise HarborTaskError(
            task.name,
            "environment.os",
            f"{env_cfg.get('os')!r}: this deployment's runtimes (docker and podman on Linux "
            "workers) run Linux containers; a Windows container needs a Windows host",
        )
    mode = verifier.get("environment_mode")
    if mode not in (None, "shared", "separate"):
        raise HarborTaskError(task.name, "verifier.environment_mode", f"unknown mode {mode!r}")
    if mode == "shared" and verifier.get("environment") is not None:
        raise HarborTaskError(
            task.name,
            "verifier.environment",
            "a verifier environment with environment_mode = 'shared': either leave the "
            "environment out or make the mode 'separate' (as Harbor refuses it)",
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


def runtime_spec(task: HarborTask, env_cfg: dict[str, Any], image: str) -> RuntimeSpec:
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
            raise HarborTaskError(task.name, where, first_error(exc)) from exc
    values.update(resources(task, env_cfg))
    values.update(_gpus(task, env_cfg))
    try:
        return RuntimeSpec(**values)
    except ValidationError as exc:
        raise HarborTaskError(task.name, "environment", first_error(exc)) from exc


def resources(
    task: HarborTask, env_cfg: dict[str, Any], where: str = "environment"
) -> dict[str, Any]:
    """An environment table's `cpus`, `memory_mb` and `storage_mb` (and the old `memory`,
    `storage`) as RuntimeSpec's `cpus`, `memory` and `disk` (those it sets)."""
    values: dict[str, Any] = {}
    if env_cfg.get("cpus") is not None:
        values["cpus"] = env_cfg["cpus"]
    for field, legacy, key in (
        ("memory_mb", "memory", "memory"),
        ("storage_mb", "storage", "disk"),
    ):
        mb = env_cfg.get(field)
        if mb is None and env_cfg.get(legacy) is not None:
            mb = _legacy_size_mb(task, f"{where}.{legacy}", env_cfg[legacy])
        if mb is not None:
            if not isinstance(mb, int) or isinstance(mb, bool) or mb < 16:
                raise HarborTaskError(task.name, f"{where}.{field}", f"{mb!r}: at least 16")
            values[key] = f"{mb}m"
    return values


def _gpus(task: HarborTask, env_cfg: dict[str, Any]) -> dict[str, Any]:
    """`gpus` and `gpu_types` as the runtime's (placed on workers declaring them, polar/gpus.py);
    types without a count ask for nothing, as in Harbor, and are refused as a likely slip."""
    gpus, types = env_cfg.get("gpus"), env_cfg.get("gpu_types")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        raise HarborTaskError(task.name, "environment.gpus", f"{gpus!r}: a count of GPUs")
    if types is not None and not (
        isinstance(types, list) and all(isinstance(t, str) and t.strip() for t in types)
    ):
        raise HarborTaskError(task.name, "environment.gpu_types", f"{types!r}: a list of types")
    if types and not gpus:
        raise HarborTaskError(
            task.name, "environment.gpu_types", "set without gpus: no GPU is asked for"
        )
    return {"gpus": gpus, "gpu_types": list(types or [])} if gpus else {}


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

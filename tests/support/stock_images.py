"""Stock-like task images, made offline for the tests that show a task's image needs nothing
of Polar's (tests/system/test_stock_images.py).

* `polar/base:bookworm`: the debootstrapped Debian the project builds (infra/images/build.py:
  `debootstrap --variant=minbase`): bash and coreutils, no python3, no git.
* `polar/stock:busybox`: a musl-like root file system of nothing but the host's static
  busybox, installed under each applet's name in /bin (as alpine's is), an /etc/passwd and
  a /tmp: no bash, no python3, no git, no libc. Alpine itself cannot be had offline.
* `polar/stock:noshell`: a distroless-like one with no shell at all (a passwd file and one
  static program, not a shell).

Each is `docker import`ed from a tar made here (nothing downloaded), labelled with a hash of
its recipe, and made again only when that changes.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from activities.runtimes import toolbox

DEBIAN = "polar/base:bookworm"
BUSYBOX = "polar/stock:busybox"
NO_SHELL = "polar/stock:noshell"
RECIPE_LABEL = "polar.recipe"
RECIPE_VERSION = "1"
PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
GROUP = b"root:x:0:\nnogroup:x:65534:\n"


def _add(
    tar: tarfile.TarFile,
    name: str,
    *,
    data: bytes | None = None,
    mode: int = 0o755,
    link: str | None = None,
) -> None:
    info = tarfile.TarInfo(name)
    info.mode = mode
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
    elif data is None:
        info.type = tarfile.DIRTYPE
    else:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _rootfs(shell: bool) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for folder in ("bin", "etc", "root", "workspace"):
            _add(tar, folder)
        _add(tar, "tmp", mode=0o1777)
        _add(tar, "etc/passwd", data=PASSWD, mode=0o644)
        _add(tar, "etc/group", data=GROUP, mode=0o644)
        busybox = toolbox.host_busybox().read_bytes()
        if shell:
            _add(tar, "bin/busybox", data=busybox)
            applets = subprocess.run(
                [str(toolbox.host_busybox()), "--list"], capture_output=True, text=True
            ).stdout.split()
            for applet in sorted(set(applets) - {"busybox"}):
                _add(tar, f"bin/{applet}", link="busybox")
        else:  # a program, not a shell (busybox under another name runs no applet)
            _add(tar, "bin/app", data=busybox)
    return buf.getvalue()


def _recipe(shell: bool) -> str:
    digest = hashlib.sha256(toolbox.host_busybox().read_bytes()).hexdigest()[:16]
    return f"v{RECIPE_VERSION} shell={shell} busybox={digest}"


def build(tag: str, shell: bool) -> str:
    """`tag` imported from a root file system made here (cached by recipe)."""
    client = docker.from_env(timeout=300)
    recipe = _recipe(shell)
    try:
        if client.images.get(tag).labels.get(RECIPE_LABEL) == recipe:
            return tag
    except ImageNotFound:
        pass
    repo, _, version = tag.partition(":")
    client.api.import_image_from_data(
        _rootfs(shell),
        repository=repo,
        tag=version,
        changes=[f'LABEL {RECIPE_LABEL}="{recipe}"', "WORKDIR /", 'CMD ["/bin/sh"]'],
    )
    return tag


def stock_images() -> dict[str, str]:
    """The stock images by name (`debian`, `busybox`, `noshell`), made where missing; the
    Debian one checked to lack python3 and git."""
    client = docker.from_env(timeout=300)
    probe = "for t in python3 git; do command -v $t && exit 1; done; exit 0"
    client.containers.run(DEBIAN, ["sh", "-c", probe], remove=True)  # raises where it has
    return {"debian": DEBIAN, "busybox": build(BUSYBOX, True), "noshell": build(NO_SHELL, False)}


def in_podman(image: str) -> None:
    """`image` in every podman store the tests use (the worker's auto mode, and root's)."""
    import os

    from activities.runtimes.kinds.podman import load_from_docker, resolve_mode

    modes = {resolve_mode()[0]} | ({"root"} if os.geteuid() == 0 else set())
    for mode in sorted(modes):
        load_from_docker(image, mode)


def task_with_image(task: Path, dest: Path, image: str) -> Path:
    """A copy of the Harbor task dir `task` in `dest` whose own image map sends its base to
    `image`."""
    import shutil

    copy = Path(shutil.copytree(task, dest))
    toml = copy / "task.toml"
    lines = toml.read_text().splitlines()
    mapped = [i for i, line in enumerate(lines) if line.startswith('"ubuntu:24.04" = ')]
    (index,) = mapped
    lines[index] = f'"ubuntu:24.04" = "{image}"'
    toml.write_text("\n".join(lines) + "\n")
    return copy


PYTHON_NO_GIT = "polar/stock:python-nogit"
NO_GIT_DOCKERFILE = """FROM {base}
RUN rm -rf /usr/bin/git /usr/bin/git-* /usr/bin/scalar /usr/lib/git-core /usr/share/git-core \\
 && ! command -v git
"""


def python_without_git(base: str) -> str:
    """`PYTHON_NO_GIT`: the suite's runtime image `base` (python3 and pytest, what a
    SWE-bench-style repository's tests need) with git removed, built offline on top of it
    (no pull) and made again only when `base` changes; checked to lack git."""
    import docker

    client = docker.from_env(timeout=300)
    recipe = f"v{RECIPE_VERSION} nogit from={client.images.get(base).id}"
    try:
        if client.images.get(PYTHON_NO_GIT).labels.get(RECIPE_LABEL) == recipe:
            return PYTHON_NO_GIT
    except ImageNotFound:
        pass
    dockerfile = io.BytesIO(NO_GIT_DOCKERFILE.format(base=base).encode())
    client.images.build(
        fileobj=dockerfile, tag=PYTHON_NO_GIT, labels={RECIPE_LABEL: recipe}, pull=False, rm=True
    )
    probe = "command -v git && exit 1; python3 -c 'import pytest'"
    client.containers.run(PYTHON_NO_GIT, ["sh", "-c", probe], remove=True)
    return PYTHON_NO_GIT

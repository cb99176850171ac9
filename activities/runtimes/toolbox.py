"""Polar's own read-only tools inside a container: what runs there when nothing the session
wrote may.

From the harness's exit on, nothing the worker starts may come from a place the session
could write (docs/threat-model.md, the trusted base). In a container the image's binaries
are such a place: the harness runs as the image's user, often root, and may replace
`/usr/bin/sleep`. A reap restarts the container's main process, so that process must not be
the image's: it is the worker host's statically linked busybox (Debian's `busybox-static`,
installed by infra/setup.sh), copied once into the runtimes root (`.toolbox/`, a name no
session id can take, at the same path for the engine where the worker runs in a container
with its runtimes dir at its host path), bind-mounted read-only at `TOOLBOX_DIR/busybox` in
every container, and run by absolute path. The mount is read-only and a container has no
capability to remount or cover it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

from activities.runtimes.base import RuntimeUnfit

TOOLBOX_DIR = "/run/polar-tools"
"""Where a container sees Polar's tools (read-only)."""
BUSYBOX = f"{TOOLBOX_DIR}/busybox"
"""The toolbox's busybox, inside a container."""
HOST_BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
"""Where the worker host's static busybox is looked for (Debian's `busybox-static`)."""


def main_command(deadline_env: str) -> list[str]:
    """A container's main process: sleep until the wall-clock deadline in `$deadline_env`
    (read again at each start, so a reap's restart keeps the deadline), every program the
    toolbox's."""
    sleep = f'exec {BUSYBOX} sleep "$(( ${deadline_env} - $({BUSYBOX} date +%s) ))"'
    return [BUSYBOX, "sh", "-c", sleep]


def _is_static_elf(path: Path) -> bool:
    """Whether `path` is an ELF executable with no program interpreter (statically linked):
    one that runs in any image, whatever its libc."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only
                return False
            order: Literal["little", "big"] = "little" if head[5] == 1 else "big"
            phoff = int.from_bytes(head[32:40], order)
            phentsize = int.from_bytes(head[54:56], order)
            phnum = int.from_bytes(head[56:58], order)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    for i in range(phnum):
        if int.from_bytes(table[i * phentsize : i * phentsize + 4], order) == 3:  # PT_INTERP
            return False
    return True


@functools.cache
def host_busybox() -> Path:
    """The worker host's static busybox, root-owned and not writable by others; RuntimeUnfit
    (an infra error of the host) where there is none."""
    for candidate in HOST_BUSYBOX_CANDIDATES:
        path = Path(candidate).resolve()
        try:
            info = path.stat()
        except OSError:
            continue
        trusted = info.st_uid == 0 and not info.st_mode & 0o022
        if trusted and os.access(path, os.X_OK) and _is_static_elf(path):
            return path
    raise RuntimeUnfit(
        "this host has no static busybox (Debian's busybox-static, installed by "
        "infra/setup.sh): a container's main process must be Polar's own program, never the "
        "image's"
    )


def installed(root: Path) -> Path:
    """The host's static busybox, copied (once per content) to `root/.toolbox/`, root's and
    read-only: the path the engine mounts."""
    source = host_busybox()
    folder = root / ".toolbox"
    target = folder / f"busybox-{_digest(source)}"
    if target.is_file() and not target.is_symlink():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    # a partial file of this call's own: threads of one worker (containers started side by
    # side) and other workers install at once, and each must rename only what it wrote
    fd, name = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.")
    partial = Path(name)
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as src:
            shutil.copyfileobj(src, out)
        partial.chmod(0o555)
        partial.replace(target)  # atomic: a concurrent install writes the same bytes
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return target


@functools.cache
def _digest(path: Path) -> str:
    """The busybox's content hash, read once per worker (not at every container start)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def docker_volumes(root: Path) -> dict[str, dict[str, str]]:
    """The toolbox's bind mounts, in the docker SDK's `volumes` form."""
    return {str(installed(root)): {"bind": BUSYBOX, "mode": "ro"}}


def volume_args(root: Path) -> list[str]:
    """The toolbox's bind mounts, as `podman run` arguments."""
    return ["--volume", f"{installed(root)}:{BUSYBOX}:ro"]

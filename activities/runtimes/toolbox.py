"""Polar's own read-only tools inside a container: what runs there when nothing the session
wrote may, and what a task's image need not have.

From the harness's exit on, nothing the worker starts may come from a place the session
could write (docs/threat-model.md, the trusted base). In a container the image's binaries
are such a place: the harness runs as the image's user, often root, and may replace
`/usr/bin/sleep`. A reap restarts the container's main process, so that process must not be
the image's. And a task's image (stock debian, alpine, a distroless one with a shell) need
not have bash, setsid or python3. So every container gets, read-only at `TOOLBOX_DIR`, the
worker host's own statically linked programs (any libc, any image), run by absolute path:

* `busybox`: Debian's `busybox-static` (the main process, `sh`, `mkdir`, `rm`);
* `bash`: Debian's `bash-static` (every command: `setsid -w bash -c ...`, the exit sweep);
* `polar-helper`: `setsid -w` and the gateway forwarder (infra/toolbox/polar-helper.c,
  built by infra/toolbox/build.sh);
* `bin/`: links to them under each applet's name, put last on a command's PATH, so a
  test.sh run with `bash` finds one where the image has none (the image's own come first).

They are copied once per content into the runtimes root (`.toolbox/{digest}/`, a name no
session id can take, at the same path for the engine where the worker runs in a container
with its runtimes dir at its host path) and that folder is bind-mounted read-only at
`TOOLBOX_DIR`. A container has no capability to remount or cover it. infra/setup.sh
installs all three on the host.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from activities.runtimes.base import RuntimeUnfit

TOOLBOX_DIR = "/run/polar-tools"
"""Where a container sees Polar's tools (read-only)."""
BUSYBOX = f"{TOOLBOX_DIR}/busybox"
"""The toolbox's busybox, inside a container."""
BASH = f"{TOOLBOX_DIR}/bash"
"""The toolbox's bash, inside a container."""
HELPER = f"{TOOLBOX_DIR}/polar-helper"
"""The toolbox's helper (`setsid`, `forward`), inside a container."""
BIN = f"{TOOLBOX_DIR}/bin"
"""Links to the toolbox's programs by applet name: the last entry of a command's PATH."""
HOST_BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
"""Where the worker host's static busybox is looked for (Debian's `busybox-static`)."""
HOST_BASH_CANDIDATES = ("/bin/bash-static", "/usr/bin/bash-static")
"""Where the worker host's static bash is looked for (Debian's `bash-static`)."""
HOST_HELPER_CANDIDATES = ("/usr/local/libexec/polar/polar-helper",)
"""Where the worker host's helper is looked for (built by infra/toolbox/build.sh)."""
PROGRAMS = {
    "busybox": (HOST_BUSYBOX_CANDIDATES, "Debian's busybox-static"),
    "bash": (HOST_BASH_CANDIDATES, "Debian's bash-static"),
    "polar-helper": (HOST_HELPER_CANDIDATES, "infra/toolbox/build.sh"),
}
"""The toolbox's programs: where the host's copy is looked for, and what provides it."""


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


def _trusted_static(candidates: tuple[str, ...]) -> Path | None:
    """The first of `candidates` that is a static ELF, root-owned and not writable by others."""
    for candidate in candidates:
        path = Path(candidate).resolve()
        try:
            info = path.stat()
        except OSError:
            continue
        trusted = info.st_uid == 0 and not info.st_mode & 0o022
        if trusted and os.access(path, os.X_OK) and _is_static_elf(path):
            return path
    return None


@functools.cache
def host_program(name: str) -> Path:
    """The worker host's static `name` (a key of PROGRAMS); RuntimeUnfit (an infra error of
    the host) where there is none."""
    candidates, provider = PROGRAMS[name]
    found = _trusted_static(candidates)
    if found is None:
        raise RuntimeUnfit(
            f"this host has no static {name} ({provider}, installed by infra/setup.sh) at "
            f"{' or '.join(candidates)}: a container runs Polar's own programs, never the "
            "image's"
        )
    return found


def host_busybox() -> Path:
    """The worker host's static busybox (RuntimeUnfit where there is none)."""
    return host_program("busybox")


def installed(root: Path) -> Path:
    """The toolbox folder (`root/.toolbox/{digest}/`: the host's programs and `bin/`), made
    once per content, root's and read-only: the folder the engine mounts."""
    sources = {name: host_program(name) for name in PROGRAMS}
    digest = hashlib.sha256("".join(_digest(p) for p in sources.values()).encode())
    folder = root / ".toolbox"
    target = folder / digest.hexdigest()[:16]
    if target.is_dir() and not target.is_symlink():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    # a folder of this call's own: threads of one worker (containers started side by side)
    # and other workers install at once, and each renames only what it wrote
    partial = Path(tempfile.mkdtemp(dir=folder, prefix=f".{target.name}."))
    try:
        for name, source in sources.items():
            with (partial / name).open("xb") as out, source.open("rb") as src:
                shutil.copyfileobj(src, out)
            (partial / name).chmod(0o555)
        _link_applets(partial)
        partial.chmod(0o755)
        try:
            partial.rename(target)  # atomic; a concurrent install made the same folder
        except OSError:
            if not target.is_dir():
                raise
            shutil.rmtree(partial, ignore_errors=True)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return target


@functools.cache
def _applets() -> frozenset[str]:
    """The host busybox's applets (never run from a copy being written: ETXTBSY)."""
    listed = subprocess.run(
        [str(host_busybox()), "--list"], capture_output=True, text=True, check=True
    )
    return frozenset(n for n in listed.stdout.split() if "/" not in n and n not in (".", ".."))


def _link_applets(folder: Path) -> None:
    """`folder/bin/`: `bash` and each of busybox's applets, a link to the program."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for name in sorted(_applets() - {"bash"}):
        (bin_dir / name).symlink_to("../busybox")
    (bin_dir / "bash").symlink_to("../bash")
    bin_dir.chmod(0o755)


@functools.cache
def _digest(path: Path) -> str:
    """A program's content hash, read once per worker (not at every container start)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def docker_volumes(root: Path) -> dict[str, dict[str, str]]:
    """The toolbox's bind mount, in the docker SDK's `volumes` form."""
    return {str(installed(root)): {"bind": TOOLBOX_DIR, "mode": "ro"}}


def volume_args(root: Path) -> list[str]:
    """The toolbox's bind mount, as `podman run` arguments."""
    return ["--volume", f"{installed(root)}:{TOOLBOX_DIR}:ro"]

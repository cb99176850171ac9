"""What a sandbox itself needs from its image or host, checked at prepare.

A container brings its own tools (activities/runtimes/toolbox.py): every command runs as the
toolbox's `setsid -w bash -c ...`, behind the toolbox's gateway forwarder, and the
workspace's baseline and diff are made by the worker's own git on a copy of the workspace
(activities/evaluators/baseline.py, patches.py). So a task's image needs nothing of Polar's:
no bash, python3, setsid or git. It needs a shell (`/bin/sh`), as Harbor's own
environments do (its commands and a task's scripts are shell): an image without one (a
distroless image, a `FROM scratch` one) is refused at prepare (`RuntimeUnfit`, an infra
error of class `image`), naming the image, before any session time is spent.

The `local` runtime runs on the worker's host: bash and git there (and python3 for the
bwrap sandbox's forwarder) are checked the same way (`missing_on_host`).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence

from activities.runtimes.base import RuntimeUnfit
from activities.runtimes.toolbox import BUSYBOX

SHELL = "/bin/sh"
"""The shell an image must have."""
NO_SHELL = "no-shell"
_PROBE = f"[ -x {SHELL} ] || echo {NO_SHELL}"


def probe_argv() -> list[str]:
    """An argv (the toolbox's shell, in the container) that prints NO_SHELL where the image
    has no `/bin/sh`."""
    return [BUSYBOX, "sh", "-c", _PROBE]


def no_shell(where: str) -> RuntimeUnfit:
    """The refusal of an image without a shell."""
    return RuntimeUnfit(
        f"{where} has no shell ({SHELL} is missing): a task's image needs one, as Harbor's "
        "environments do (its commands and scripts are shell); build the image on one with "
        "a shell (debian, ubuntu, alpine, busybox)"
    )


def missing_on_host(tools: Iterable[str], path: str | None = None) -> list[str]:
    """The tools not found on the host's `path` (default: the worker's PATH)."""
    return [tool for tool in tools if shutil.which(tool, path=path) is None]


def refuse(where: str, missing: Sequence[str]) -> RuntimeUnfit:
    """The prepare-time refusal of `where` (a host), naming what it lacks."""
    return RuntimeUnfit(
        f"{where} lacks what the sandbox needs: {', '.join(missing)} not found on its PATH "
        f"(the sandbox runs commands with bash, serves the gateway with python3 "
        "and records the workspace with git)"
    )


def check_probe(where: str, exit_code: int, output: str) -> None:
    """RuntimeUnfit where the probe could not run (the toolbox missing in the container) or
    found no shell."""
    if exit_code != 0:
        raise RuntimeUnfit(
            f"{where} cannot run the sandbox's shell check (is the toolbox mounted?): exit "
            f"{exit_code}: {output.strip()[-300:]}"
        )
    if NO_SHELL in output.split():
        raise no_shell(where)

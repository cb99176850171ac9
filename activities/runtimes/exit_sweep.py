"""The exit sweep: inside a container, nothing a command started outlives its exit.

A container's commands run with `docker exec` / `podman exec` in the container's
one PID namespace, so what a harness detaches (`setsid`, a double fork) is
reparented to the container's init and keeps running after the harness exits.
The worker's reap (SIGKILL to the init, activities/runtimes/kinds/docker.py) takes it,
but only after the exec has returned, the output was copied back and the relay
closed: seconds on a loaded host, long enough for a detached writer to put a
fix into the workspace after the harness's run ended (tests/system/test_adversarial.py,
`late_fix`).

So the command runs under a sweep in the same bash that starts it: the pids that
exist before it (the init, the container's main process, this exec's own chain)
are noted, the command runs, and once it exits every other process is SIGKILLed,
pass after pass, until a pass finds none. Only bash builtins and /proc are used
(no `ps` on the image's PATH needed); in a container the bash is the toolbox's
(activities/runtimes/toolbox.py), given by absolute path, and the toolbox's `bin/` is
appended to the command's PATH (the image's own programs first). The `local` and
`bwrap` runtimes need no sweep: each command is the init of its own PID namespace, and
the kernel kills the namespace when it exits.

A pid the sweep keeps stays alive until the sweep (the init, the main process and
the exec's chain never exit before it), so no process of the command can be
given one of their numbers.
"""

from __future__ import annotations

import shlex

MAX_PASSES = 200
"""Sweeps before giving up (zombies waiting for the init to reap them answer `kill` too; the
worker's reap still follows every run)."""

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH of a command whose environment has none (the engines' default)."""

_SWEEP = (  # PATHSET, BASH and COMMAND are filled in by with_exit_sweep
    "PATHSET"
    'keep=" "; for d in /proc/[0-9]*; do keep+="${d#/proc/} "; done; '
    "BASH -c COMMAND; rc=$?; "
    f"for ((pass = 0; pass < {MAX_PASSES}; pass++)); do "
    "found=; "
    "for d in /proc/[0-9]*; do p=${d#/proc/}; "
    'case "$keep" in *" $p "*) continue;; esac; '
    'kill -KILL "$p" 2>/dev/null && found=1; '
    "done; "
    '[ -z "$found" ] && break; '
    "done; "
    "exit $rc"
)


def with_exit_sweep(command: str, bash: str = "bash", path_tail: str | None = None) -> str:
    """A bash command line that runs `command` (with `{bash} -c`), then SIGKILLs every process
    that appeared in the PID namespace since it began; its exit code is the command's.
    `path_tail`: a dir appended to the command's PATH."""
    pathset = ""
    if path_tail is not None:
        tail = shlex.quote(":" + path_tail)
        pathset = f'export PATH="${{PATH:-{DEFAULT_PATH}}}"{tail}; '
    filled = _SWEEP.replace("PATHSET", pathset, 1).replace("BASH", shlex.quote(bash), 1)
    return filled.replace("COMMAND", shlex.quote(command), 1)

"""The sandbox's side of its gateway channel: where it finds the channel (the folder, the
socket, the forwarder script, the loopback port) and the command line that runs a harness
behind the in-sandbox forwarder. Apart from the relay's server (channel.py), so that the
runtimes, and `polar submit`'s checks of a task's kinds, import without the server's
packages."""

from __future__ import annotations

import shlex
from pathlib import Path

SANDBOX_DIR = "/run/polar"
"""The channel's folder inside a sandbox (its socket, the forwarder)."""
SANDBOX_PORT = 4000
"""The port on the sandbox's loopback where its harness reaches the gateway."""
SOCKET_NAME = "gateway.sock"
FORWARDER_NAME = "forwarder.py"
FORWARDER_SCRIPT = Path(__file__).with_name(FORWARDER_NAME)
"""The forwarder (forwarder.py), copied into each channel's folder (the local runtime's)."""
TOOLBOX_HELPER = "/run/polar-tools/polar-helper"
"""A container's forwarder: the toolbox's (activities/runtimes/toolbox.py `HELPER`)."""
TOOLBOX_BASH = "/run/polar-tools/bash"
"""A container's bash: the toolbox's (activities/runtimes/toolbox.py `BASH`)."""


def with_forwarder(
    command: str,
    channel_in_sandbox: str,
    port: int = SANDBOX_PORT,
    socket_name: str = SOCKET_NAME,
) -> str:
    """A bash command line that runs `command` behind the in-sandbox forwarder: it binds
    127.0.0.1:{port}, forks the forwarder (spliced to `{channel}/{socket_name}`, its stderr in
    `$TMPDIR/polar-forwarder-{port}.log`) and execs `bash -c command` in its place, so the port
    listens before the command starts and the command's exit code is the result. In a
    container the forwarder is the toolbox's static helper (activities/runtimes/toolbox.py:
    the image needs no python3) and the bash the toolbox's; elsewhere (the local runtime)
    `python3` runs `{channel}/forwarder.py`. Without either, or when the port cannot be
    bound, the command never runs: exit 97 and a line on stderr saying why. Nests: the
    egress proxy's forwarder (activities/runtimes/network/egress.py) wraps the gateway's."""
    channel = channel_in_sandbox.rstrip("/") or "/"
    script = shlex.quote(f"{channel}/{FORWARDER_NAME}")
    sock = shlex.quote(f"{channel}/{socket_name}")
    log = f'--log "${{TMPDIR:-/tmp}}/polar-forwarder-{port}.log"'
    failed = f"polar: the forwarder did not start on 127.0.0.1:{port}"
    helper, bash = shlex.quote(TOOLBOX_HELPER), shlex.quote(TOOLBOX_BASH)
    return (
        f"polar_command={shlex.quote(command)}; "
        f"if [ -x {helper} ]; then exec {helper} forward --socket {sock} --port {port} {log} "
        f'-- {bash} -c "$polar_command"; fi; '
        f"if ! command -v python3 >/dev/null || [ ! -r {script} ]; then "
        f"echo {shlex.quote(failed + ': no python3 or no ' + channel + '/' + FORWARDER_NAME)} >&2; "
        "exit 97; fi; "
        f"exec python3 -I -S {script} --socket {sock} --port {port} {log} "
        '-- bash -c "$polar_command"'
    )

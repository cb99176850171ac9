"""`polar shell IMAGE`'s container: sealed as a session's is, the gateway behind the forwarder."""

from __future__ import annotations

import shlex
from pathlib import Path

from typer.testing import CliRunner

from app.cli import app
from app.cli.image_shell import docker_argv


def test_the_container_has_no_network_and_the_channel_read_only() -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:4000/v1", "OPENAI_API_KEY": "polar-sealed-channel"}
    argv = docker_argv("polar/runtime:py311", Path("/tmp/x/channel"), env, [], tty=True)
    assert argv[:2] == ["docker", "run"]
    assert "--network" in argv and argv[argv.index("--network") + 1] == "none"
    assert argv[argv.index("--volume") + 1] == "/tmp/x/channel:/run/polar:ro"
    assert "--tty" in argv and "--rm" in argv
    envs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--env"]
    assert envs == [f"{k}={v}" for k, v in env.items()]
    image_at = argv.index("polar/runtime:py311")
    shell, flag, line = argv[image_at + 1 :]
    assert (shell, flag) == ("bash", "-c")
    # the forwarder serves the channel's socket on 127.0.0.1:4000, then the shell runs (no
    # toolbox is mounted here: the image's python3 serves it, as in a session without one)
    assert "python3 -I -S /run/polar/forwarder.py --socket /run/polar/gateway.sock" in line
    assert "--port 4000" in line and line.startswith("polar_command=bash; ")
    assert line.endswith('-- bash -c "$polar_command"')


def test_a_command_runs_in_place_of_the_shell_quoted_and_without_a_tty() -> None:
    argv = docker_argv("img", Path("/c"), {}, ["python3", "-c", "print('a b')"], tty=False)
    assert "--tty" not in argv and "--interactive" in argv
    [assignment] = shlex.split(argv[-1].split("; ", 1)[0])
    inner = assignment.removeprefix("polar_command=")
    assert shlex.split(inner) == ["python3", "-c", "print('a b')"]


def test_the_command_is_on_polars_help() -> None:
    result = CliRunner().invoke(app, ["shell", "--help"])
    assert result.exit_code == 0 and "sealed as a session is" in result.output

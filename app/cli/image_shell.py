"""`polar shell IMAGE`: a shell in a session image, sealed as a session is, to try it by hand.

The container has no network (`--network none`); its only way out is a gateway channel this
command serves for it, as a worker does for a session (activities/runtimes/network/channel.py):
a relay on a Unix socket, bind-mounted read-only at /run/polar, that forwards each call to the
gateway with a session key minted here (POLAR_SESSION_SECRET, or the dev stack's), and the
in-sandbox forwarder serving that socket on the container's 127.0.0.1:4000. The shell gets the
variables a session's harness gets (`OPENAI_BASE_URL`, ..., a placeholder key: the channel is
the identity), so a CLI tried here calls the gateway as it would in a session, and its calls
are recorded under `sessions/{session_id}/completions/`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, NoReturn

import typer

DEFAULT_TASK = "shell"
KEY_TTL_S = 12 * 3600.0
"""How long the minted key is valid: a shell kept open longer loses the gateway."""


def docker_argv(
    image: str, channel_dir: Path, env: dict[str, str], command: list[str], tty: bool
) -> list[str]:
    """`docker run` of `image` as a sealed session: no network, the channel dir read-only at
    /run/polar, `env` set, and `command` (default: bash) behind the in-sandbox forwarder."""
    from activities.runtimes.network.channel_paths import SANDBOX_DIR, with_forwarder

    argv = ["docker", "run", "--rm", "--init", "--network", "none", "--interactive"]
    if tty:
        argv.append("--tty")
    argv += ["--volume", f"{channel_dir}:{SANDBOX_DIR}:ro"]
    for name, value in env.items():
        argv += ["--env", f"{name}={value}"]
    inner = shlex.join(command) if command else "bash"
    return [*argv, image, "bash", "-c", with_forwarder(inner, SANDBOX_DIR)]


def shell(
    image: Annotated[str, typer.Argument(help="the session image, e.g. polar/runtime:py311")],
    command: Annotated[
        list[str] | None,
        typer.Argument(help="a command to run in place of an interactive bash (after --)"),
    ] = None,
    session_id: Annotated[
        str | None,
        typer.Option(help="the session its calls are recorded under (default: shell-<random>)"),
    ] = None,
    task_id: Annotated[str, typer.Option(help="the task that session belongs to")] = DEFAULT_TASK,
    model: Annotated[str, typer.Option(help="the model name the shell is told")] = "policy",
    instruction: Annotated[str, typer.Option(help="$POLAR_INSTRUCTION in the shell")] = "",
) -> None:
    """Open a shell (or run a command) in a session image, sealed as a session is: no network,
    the gateway on 127.0.0.1:4000 through a session channel; exit with its exit code."""
    import asyncio
    import secrets
    import shutil
    import sys
    import tempfile

    from activities.harnesses.command import gateway_env
    from activities.runtimes.network.channel import (
        PLACEHOLDER_KEY,
        SANDBOX_GATEWAY_URL,
        GatewayRelay,
    )
    from app.cli.exit_codes import ExitCode
    from app.cli.main import err_console
    from polar.session_keys import SessionIdentity, mint_session_key
    from polar.settings import ServiceSettings, get_settings

    def fail(text: str) -> NoReturn:
        err_console.print(f"polar shell: {text}", markup=False, highlight=False)
        raise typer.Exit(ExitCode.INVALID_INPUT)

    if shutil.which("docker") is None:
        fail("the docker command is missing (it runs the image)")
    settings = get_settings(ServiceSettings)
    session_id = session_id or f"shell-{secrets.token_hex(4)}"
    try:
        key = mint_session_key(
            SessionIdentity(session_id, task_id), settings.session_secret, ttl_s=KEY_TTL_S
        )
    except ValueError as exc:  # an unsafe id (InvalidId), no secret
        fail(f"cannot mint a session key: {exc}")
    env = gateway_env(
        gateway_url=SANDBOX_GATEWAY_URL,
        api_key=PLACEHOLDER_KEY,
        model=model,
        session_id=session_id,
        task_id=task_id,
    )
    env["POLAR_INSTRUCTION"] = instruction

    async def run() -> int:
        with tempfile.TemporaryDirectory(prefix="polar-shell-") as tmp:
            channel = Path(tmp) / "channel"
            async with GatewayRelay(channel, settings.gateway_base_url, key):
                argv = docker_argv(image, channel, env, command or [], sys.stdin.isatty())
                process = await asyncio.create_subprocess_exec(*argv)
                return await process.wait()

    err_console.print(
        f"session {session_id} of task {task_id}: calls to {SANDBOX_GATEWAY_URL} are "
        f"recorded under sessions/{session_id}/completions/",
        markup=False,
        highlight=False,
    )
    raise typer.Exit(asyncio.run(run()))

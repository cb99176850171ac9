"""`polar key`: session keys minted by hand, for running a harness against a gateway."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

keys_app = typer.Typer(help="Session keys, for running a harness by hand against a gateway.")


@keys_app.command("mint")
def key_mint(
    session_id: Annotated[str, typer.Option(help="the session the key records calls into")],
    task_id: Annotated[str, typer.Option(help="the task the session belongs to")],
    ttl_s: Annotated[float, typer.Option(help="seconds the key stays valid")] = 24 * 3600.0,
    gateway_url: Annotated[
        str | None, typer.Option(help="the gateway's root as the harness reaches it")
    ] = None,
    model: Annotated[str, typer.Option(help="model name the harness is told to use")] = "policy",
    key_only: Annotated[bool, typer.Option("--key-only", help="print the key alone")] = False,
) -> None:
    """Mint a session key with the configured secret (POLAR_SESSION_SECRET) and print the
    `export` lines of every provider's variables pointed at the gateway, for a harness run
    by hand: eval "$(polar key mint --session-id s1 --task-id t1)"."""
    import math
    import shlex

    from activities.harnesses.command import gateway_env
    from polar.session_keys import SessionIdentity, mint_session_key
    from polar.settings import ServiceSettings, get_settings

    errors = Console(stderr=True)

    def fail(text: str) -> None:  # plain text: an id or secret is never read as markup
        errors.print(text, markup=False, soft_wrap=True)

    if not (math.isfinite(ttl_s) and ttl_s > 0):
        fail(f"--ttl-s must be a positive number of seconds, not {ttl_s}")
        raise typer.Exit(2)
    settings = get_settings(ServiceSettings)
    try:
        api_key = mint_session_key(
            SessionIdentity(session_id, task_id), settings.session_secret, ttl_s=ttl_s
        )
    except ValueError as exc:  # an unsafe id (InvalidId), no secret
        fail(f"cannot mint a session key: {exc}")
        raise typer.Exit(2) from None
    if key_only:
        print(api_key)
        return
    env = gateway_env(
        gateway_url=gateway_url or settings.gateway_base_url,
        api_key=api_key,
        model=model,
        session_id=session_id,
        task_id=task_id,
    )
    print(f"# session {session_id} of task {task_id}; the key is valid for {ttl_s:g} s")
    for name, value in env.items():
        print(f"export {name}={shlex.quote(value)}")

"""What a command needs beyond the client install (`pip install polar-rollout`): the
`server` extra for the worker, gateway, console, dev stack and demo, and the `export`
extra for `polar export`'s `hf` and `verl` formats; checked before the command does
anything else, by `find_spec` (nothing is imported)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

import typer

from app.cli.exit_codes import ExitCode
from app.cli.main import err_console

SERVER_MODULES = ("uvicorn", "fastapi", "docker")
"""Key modules of the `server` extra: one missing means the extra is not installed."""


def missing_modules(modules: Iterable[str]) -> list[str]:
    """Those of `modules` that cannot be imported here (a bare folder of that name, a
    namespace package, counts as missing)."""
    missing = []
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            missing.append(name)
    return missing


def require_extra(extra: str, modules: Iterable[str], what: str) -> None:
    """Exit 1 with one line naming the extra and how to install it, unless every one of
    `modules` is installed."""
    missing = missing_modules(modules)
    if missing:
        err_console.print(
            f"polar: {what} needs polar-rollout[{extra}] ({', '.join(missing)} not installed): "
            f"pip install 'polar-rollout[{extra}]'",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(ExitCode.ERROR)


def require_server(command: str) -> None:
    """`polar COMMAND` stops here, saying so, where the `server` extra is not installed."""
    require_extra("server", SERVER_MODULES, f"`polar {command}`")

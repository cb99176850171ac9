"""The `polar` process: its console, its global flags, and how it ends (`exit_process`)."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from app.cli.exit_codes import ExitCode

TEMPORAL_BRIDGE = "temporalio.bridge.temporal_sdk_bridge"
"""The Temporal SDK's native module: loaded once a command has used a Temporal client."""

# a pipe or CI log gets wide lines instead of 80 columns of wrapped ids
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)
"""Warnings and refusals: stderr, so that `--json` output on stdout stays JSON; one line
each, never wrapped (a script may grep them)."""


def exit_process(code: int | str | None) -> NoReturn:
    """End the `polar` process with `code` (SystemExit's meaning).

    Once the Temporal SDK's native bridge is loaded, its Tokio threads may still
    call into Python while the interpreter finalises, which aborts the process
    after a complete result (exit 134, `Fatal Python error: PyGILState_Release`;
    temporalio/sdk-python#300, the SDK has no way to close a client). Then it does
    what a normal exit does first (Python threads joined, exit handlers run,
    stdout and stderr flushed) and ends without the finalisation (`os._exit`)."""
    if TEMPORAL_BRIDGE not in sys.modules:
        sys.exit(code)
    if isinstance(code, str):  # SystemExit("message"): the message, exit 1
        print(code, file=sys.stderr)
    # what a normal exit does before finalising: join the threads (and shut the executors
    # down), then run the exit handlers (logging, finalizers)
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            continue
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def plain_error(exc: Exception) -> str | None:
    """A one-line message for errors of the user's situation (no Temporal there, no such
    workflow), None for anything else (a bug: its traceback is shown)."""
    from temporalio.service import RPCError, RPCStatusCode

    from polar.ids import InvalidId
    from polar.settings import ClientSettings, get_settings

    if isinstance(exc, InvalidId):  # no such workflow can exist
        return f"not found: {exc}"
    if isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND:
        return f"not found: {exc.message}"
    if isinstance(exc, RuntimeError) and str(exc).startswith("Failed client connect"):
        address = get_settings(ClientSettings).temporal_address
        return (
            f"cannot reach Temporal at {address} (is the stack up? `polar dev up`, or set "
            "POLAR_TEMPORAL_ADDRESS)"
        )
    return None


class PolarApp(typer.Typer):
    """The `polar` app; run as a process (the console script, `python -m app.cli`) it ends
    through `exit_process`. CliRunner tests call its click command and never get here."""

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        try:
            super().__call__(*args, **kwargs)
        except SystemExit as exc:
            exit_process(exc.code)
        except KeyboardInterrupt:
            exit_process(ExitCode.INTERRUPTED)
        except Exception as exc:  # noqa: BLE001 - said plainly, or Typer's traceback; exit 1
            message = plain_error(exc)
            if message is None:
                sys.excepthook(*sys.exc_info())
            else:
                print(f"polar: {message}", file=sys.stderr)
            exit_process(ExitCode.ERROR)
        exit_process(ExitCode.OK)


def main(
    data_dir: Annotated[Path | None, typer.Option(help="state and logs [POLAR_DATA_DIR]")] = None,
    temporal_address: Annotated[str | None, typer.Option(help="[POLAR_TEMPORAL_ADDRESS]")] = None,
    s3_endpoint: Annotated[str | None, typer.Option(help="[POLAR_S3_ENDPOINT]")] = None,
    upstream_urls: Annotated[
        str | None, typer.Option(help="model backends, comma-separated [POLAR_UPSTREAM_URLS]")
    ] = None,
    gateway_port: Annotated[int | None, typer.Option(help="[POLAR_GATEWAY_PORT]")] = None,
    model_dir: Annotated[Path | None, typer.Option(help="HF model dir [POLAR_MODEL_DIR]")] = None,
) -> None:
    """Flags override the POLAR_* environment, for this process and the ones it starts."""
    from polar.settings import get_settings

    overrides = {
        "POLAR_DATA_DIR": data_dir,
        "POLAR_TEMPORAL_ADDRESS": temporal_address,
        "POLAR_S3_ENDPOINT": s3_endpoint,
        "POLAR_UPSTREAM_URLS": upstream_urls,
        "POLAR_GATEWAY_PORT": gateway_port,
        "POLAR_MODEL_DIR": model_dir,
    }
    for name, value in overrides.items():
        if value is not None:
            os.environ[name] = str(value)
    get_settings.cache_clear()

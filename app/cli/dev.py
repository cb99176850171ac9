"""`polar dev`: the embedded dev stack's commands (up, down, status, model) and its tiny model."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli.extras import require_server
from app.cli.main import console

if TYPE_CHECKING:
    from polar.settings import Settings

dev_app = typer.Typer(
    help="The embedded dev stack (Temporal, SeaweedFS, vLLM, gateway, console, worker)."
)


def default_model_dir(settings: Settings) -> Path:
    """The tiny model: the data dir's if one was built there, else a checkout's
    `.polar/models/tiny-qwen3` (infra/setup.sh builds it there; the data dir is elsewhere)."""
    from polar.assets import checkout_root

    mine = (settings.data_dir / "models" / "tiny-qwen3").resolve()
    root = checkout_root()
    if (mine / ".complete").exists() or root is None:
        return mine
    return (root / ".polar" / "models" / "tiny-qwen3").resolve()


def vllm_python(settings: Settings) -> Path:
    """The CPU vLLM venv's python (checkout-only: infra/setup.sh), or exit 1 saying so."""
    if not Path(settings.vllm_python).exists():
        console.print(
            f"[red]no vLLM environment at {settings.vllm_python}: run infra/setup.sh in a "
            "checkout, or set POLAR_VLLM_PYTHON (or start the stack with --no-model)[/red]"
        )
        raise typer.Exit(1)
    return Path(settings.vllm_python)


def ensure_tiny_model(settings: Settings) -> Path:
    """Build the project's tiny model (tokenizer, template, random weights) unless present."""
    from polar.assets import AssetMissing, asset_dir

    target = default_model_dir(settings)
    if not (target / ".complete").exists():
        python = vllm_python(settings)
        try:
            script = asset_dir("tiny_model") / "build_tiny_model.py"
        except AssetMissing as exc:
            console.print(f"[red]{exc}[/red]")
            raise typer.Exit(1) from exc
        console.print(f"building the tiny test model in {target} …")
        subprocess.run([str(python), str(script), str(target)], check=True)
    return target


def _stack(with_model: bool = True, workers: int = 1) -> Any:
    from app.devstack import DevStack
    from polar.settings import get_settings

    settings = get_settings()
    if with_model and settings.model_dir is None and settings.upstream_model:
        vllm_python(settings)
        os.environ["POLAR_MODEL_DIR"] = str(ensure_tiny_model(settings))
        get_settings.cache_clear()
        settings = get_settings()
    return DevStack(settings, with_model=with_model, workers=workers)


@dev_app.command("up")
def dev_up(
    model: Annotated[bool, typer.Option(help="also serve the model with vLLM")] = True,
    workers: Annotated[int, typer.Option(help="worker processes")] = 1,
) -> None:
    """Start every part of the embedded stack (idempotent)."""
    require_server("dev up")
    from app.devstack import StackError

    stack = _stack(model, workers)
    try:
        stack.up(log=console.print)
    except StackError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc
    s = stack.settings
    console.print(f"Temporal Web UI: http://127.0.0.1:{s.temporal_ui_port}")
    console.print(f"gateway: {s.gateway_base_url}  S3: {s.s3_endpoint}/{s.s3_bucket}")
    console.print(f"console: {s.console_base_url}")


@dev_app.command("down")
def dev_down() -> None:
    """Stop every part of the embedded stack."""
    require_server("dev down")
    _stack(False).down(log=console.print)


@dev_app.command("status")
def dev_status() -> None:
    """Show which parts of the stack run."""
    require_server("dev status")
    for name, state in _stack(False).status().items():
        console.print(f"{name:10} {state}")


@dev_app.command("model")
def dev_model() -> None:
    """Build the tiny local model the dev stack serves (no download)."""
    require_server("dev model")
    from polar.settings import get_settings

    console.print(str(ensure_tiny_model(get_settings())))

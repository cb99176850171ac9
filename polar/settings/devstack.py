"""What only the embedded dev stack reads: its vLLM."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from polar.settings.base import PolarSettings, checkout_path


class DevStackSettings(PolarSettings):
    """The dev stack's own model server (`polar dev up`)."""

    vllm_port: int = Field(default=8000, description="port of the dev stack's vLLM")
    vllm_python: Path = Field(
        default_factory=lambda: checkout_path(".venv-vllm/bin/python"),
        description="python of the CPU vLLM venv; default: the checkout's .venv-vllm/bin/python "
        "(infra/setup.sh makes it)",
    )
    vllm_weight_reload: bool = Field(
        default=False,
        description="dev vLLM: enable its in-place weight reload (/collective_rpc, dev mode)",
    )

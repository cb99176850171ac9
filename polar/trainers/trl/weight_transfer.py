"""TRL 1.16's `AsyncGRPOTrainer`: Polar's weight transfer (`PolarWeightTransfer`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from polar.trainers.weights import InPlaceReload, write_safetensors


class PolarWeightTransfer:
    """`AsyncGRPOTrainer(weight_transfer=...)`: TRL streams `(name, tensor)` pairs; they are
    written into the trainer's checkpoint (`reload.policy_dir`, never the folder vLLM serves)
    and vLLM reloads it in place from there, between the gateway's pause and resume
    (`InPlaceReload`). The trainer then calls the worker's `update_model_version`, which tags
    Polar's next tasks."""

    def __init__(self, reload: InPlaceReload) -> None:
        self.reload = reload
        self.sent = 0

    def init_weight_transfer(self) -> None:
        """Refuse a `policy_dir` that a vLLM serves; create it where it is not there yet."""
        self.reload.check_not_served()
        self.reload.policy_dir.mkdir(parents=True, exist_ok=True)

    def pause(self) -> None:
        self.reload.pause()

    def send_weights(self, iterator: Iterator[tuple[str, Any]]) -> None:
        """Write the tensors into the trainer's checkpoint, then vLLM reloads from it (the
        gateway is paused)."""
        self.sent += write_safetensors(self.reload.policy_dir, iterator)
        self.reload.reload()
        self.reload.syncs += 1

    def resume(self) -> None:
        self.reload.resume()

    def destroy(self) -> None:
        return None

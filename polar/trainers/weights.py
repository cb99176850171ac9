"""Moving a trainer's new weights into the policy's inference servers, through the gateway's pause.

One sync: pause every gateway (`POST /admin/pause` answers once the in-flight model calls have
finished; new ones are held), write the weights into the directory vLLM serves, have vLLM reload
them in place (`POST /collective_rpc` `reload_weights`, on with `POLAR_VLLM_WEIGHT_RELOAD=1`), drop
its prefix cache (prompt KV computed by the old weights), resume the gateways. Sessions that were
mid-run simply continue on the new weights after the pause; their recorded logprobs are the ones
vLLM really sampled with.

This is the dev stack's CPU path (vLLM's in-place reload from a checkpoint directory). A model
whose output head is tied to its embeddings is not refreshed by that reload: train an untied copy
(`examples/grpo/train.py:untied_copy`). Where vLLM's own weight-update API is served (NCCL
streaming, TRL's `WeightTransferClient`), use that instead and keep the gateway's pause around it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from polar.settings import Settings

log = logging.getLogger("polar.trainers.weights")


@dataclass
class InPlaceReload:
    """Pause the gateways, write the weights, reload vLLM in place, resume (see the module).

    `policy_dir`: the model directory vLLM serves (writable). `vllm_urls`: each vLLM server's
    root (no `/v1`). `admin_urls`: each gateway's admin listener."""

    policy_dir: Path
    vllm_urls: Sequence[str]
    admin_urls: Sequence[str]
    admin_token: str
    timeout_s: float = 600.0
    initial_version: int = 0
    """the weight version served before the first sync."""
    syncs: int = field(default=0, init=False)
    """how many syncs completed."""

    @property
    def version(self) -> int:
        """The weight version served now: `initial_version` plus the syncs that completed."""
        return self.initial_version + self.syncs

    @classmethod
    def from_settings(cls, settings: Settings, policy_dir: Path | None = None) -> InPlaceReload:
        """The dev stack's vLLM (`vllm_port`) and gateway admin listener, `model_dir` as served."""
        folder = policy_dir or settings.model_dir
        if folder is None:
            raise ValueError("no policy dir: pass policy_dir or set POLAR_MODEL_DIR")
        if not settings.admin_token:
            raise ValueError("a weight sync pauses the gateway: set POLAR_ADMIN_TOKEN")
        return cls(
            policy_dir=Path(folder),
            vllm_urls=[f"http://127.0.0.1:{settings.vllm_port}"],
            admin_urls=[settings.admin_base_url],
            admin_token=settings.admin_token,
        )

    # the three steps, for callers that drive them apart (TRL's WeightTransferProtocol)
    def pause(self) -> None:
        """Stop admitting model calls on every gateway; returns once in-flight calls finished."""
        with self._client() as http:
            for url in self.admin_urls:
                http.post(f"{url}/admin/pause", headers=self._auth()).raise_for_status()

    def reload(self) -> None:
        """Every vLLM server reloads `policy_dir` in place and drops its prefix cache."""
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(self.policy_dir)}}
        with self._client() as http:
            for url in self.vllm_urls:
                http.post(f"{url}/collective_rpc", json=rpc).raise_for_status()
                http.post(f"{url}/reset_prefix_cache").raise_for_status()

    def resume(self) -> None:
        """Admit model calls again on every gateway (held calls go through); each call they
        admit from now on records `version` as the weights that sampled it."""
        with self._client() as http:
            for url in self.admin_urls:
                http.post(
                    f"{url}/admin/resume",
                    params={"policy_version": self.version},
                    headers=self._auth(),
                ).raise_for_status()

    def sync(self, save: Callable[[Path], None]) -> None:
        """Pause, `save(policy_dir)` (write the new weights there), reload, resume (always)."""
        self.pause()
        try:
            save(self.policy_dir)
            self.reload()
            self.syncs += 1
        finally:
            self.resume()  # with the new version if the reload went through

    async def sync_async(self, save: Callable[[Path], None]) -> None:
        """`sync` off the event loop (the gateways and vLLM are other processes)."""
        await asyncio.to_thread(self.sync, save)

    def _client(self) -> httpx.Client:
        return httpx.Client(timeout=self.timeout_s)

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}


def write_safetensors(policy_dir: Path, tensors: Iterable[tuple[str, object]]) -> int:
    """Write named tensors over the served checkpoint (`model.safetensors` in `policy_dir`):
    tensors it already has are replaced, the rest kept. Returns how many were written."""
    import torch
    from safetensors.torch import load_file, save_file

    path = policy_dir / "model.safetensors"
    state = load_file(path) if path.exists() else {}
    written = 0
    for name, tensor in tensors:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"weight {name!r} is a {type(tensor).__name__}, not a torch.Tensor")
        if name in state and tuple(state[name].shape) != tuple(tensor.shape):
            raise ValueError(
                f"weight {name!r} has shape {tuple(tensor.shape)}, the served model "
                f"{tuple(state[name].shape)}"
            )
        dtype = state[name].dtype if name in state else tensor.dtype
        state[name] = tensor.detach().to("cpu", dtype=dtype).contiguous()
        written += 1
    save_file(state, str(path), metadata={"format": "pt"})
    return written

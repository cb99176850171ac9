"""Moving a trainer's new weights into the policy's inference servers, through the gateway's pause.

One sync: pause every gateway (`POST /admin/pause` answers once the in-flight model calls have
finished; new ones are held), write the weights into `policy_dir`, a folder of the trainer's
own, have vLLM reload them in place from there (`POST /collective_rpc` `reload_weights` with
`weights_path`: served only by a vLLM started with `POLAR_VLLM_WEIGHT_RELOAD=1`, else a 404),
drop its prefix cache (prompt KV computed by the old weights), resume the gateways. Sessions
that were mid-run simply continue on the new weights after the pause; their recorded logprobs
are the ones vLLM really sampled with.

`policy_dir` is never the folder vLLM was started from (the model `polar dev up` serves): a
sync writes the trainer's weights over it, which would destroy that model. `from_settings`
refuses `POLAR_MODEL_DIR`, and the first sync refuses a folder any vLLM reports as its model's
root (`GET /v1/models`). A vLLM that restarts serves its own folder again, not the trainer's.

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

    `policy_dir`: the trainer's folder the weights are written to and vLLM reloads from (not
    the folder vLLM serves; a relative one is made absolute here, since vLLM resolves it in
    its own working directory). `vllm_urls`: each vLLM server's root (no `/v1`). `admin_urls`:
    each gateway's admin listener."""

    policy_dir: Path
    vllm_urls: Sequence[str]
    admin_urls: Sequence[str]
    admin_token: str
    timeout_s: float = 600.0
    initial_version: int = 0
    """the weight version served before the first sync."""
    syncs: int = field(default=0, init=False)
    """how many syncs completed."""
    _checked: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        # vLLM reads the folder in its own process, whose working directory is not ours
        self.policy_dir = Path(self.policy_dir).expanduser().resolve()

    @property
    def version(self) -> int:
        """The weight version served now: `initial_version` plus the syncs that completed."""
        return self.initial_version + self.syncs

    @classmethod
    def from_settings(cls, settings: Settings, policy_dir: Path) -> InPlaceReload:
        """The dev stack's vLLM (`vllm_port`) and gateway admin listener; the weights go to
        `policy_dir`, which must not be `model_dir` (the folder vLLM serves)."""
        if not settings.admin_token:
            raise ValueError("a weight sync pauses the gateway: set POLAR_ADMIN_TOKEN")
        if settings.model_dir is not None:
            refuse_served(Path(policy_dir), [str(Path(settings.model_dir).expanduser().resolve())])
        return cls(
            policy_dir=Path(policy_dir),
            vllm_urls=[f"http://127.0.0.1:{settings.vllm_port}"],
            admin_urls=[settings.admin_base_url],
            admin_token=settings.admin_token,
        )

    def check_not_served(self) -> None:
        """Refuse a `policy_dir` that a vLLM serves (its `/v1/models` root); once."""
        if self._checked:
            return
        roots: list[str] = []
        with self._client() as http:
            for url in self.vllm_urls:
                try:
                    answer = http.get(f"{url}/v1/models")
                    answer.raise_for_status()
                    roots += [str(m.get("root") or "") for m in answer.json().get("data", [])]
                except (httpx.HTTPError, ValueError, AttributeError) as exc:
                    log.warning("could not read %s/v1/models to check policy_dir: %s", url, exc)
        refuse_served(self.policy_dir, roots)
        self._checked = True

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
                answer = http.post(f"{url}/collective_rpc", json=rpc)
                if answer.status_code == 404:
                    raise RuntimeError(
                        f"vLLM at {url} serves no /collective_rpc: start it with "
                        "POLAR_VLLM_WEIGHT_RELOAD=1 (in-place weight reload)"
                    )
                if answer.is_error:
                    raise RuntimeError(
                        f"vLLM at {url} could not reload {self.policy_dir} "
                        f"({answer.status_code}): {answer.text[:500]}"
                    )
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
        self.check_not_served()
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


def refuse_served(policy_dir: Path, served: Sequence[str]) -> None:
    """Raise ValueError where `policy_dir` is one of the `served` model folders (absolute
    paths; others are skipped): a sync would write the trainer's weights over that model."""
    mine = policy_dir.expanduser().resolve()
    for root in served:
        if root and Path(root).is_absolute() and Path(root).resolve() == mine:
            raise ValueError(
                f"policy_dir {policy_dir} is the folder vLLM serves: a weight sync would write "
                "the trainer's weights over that model. Give InPlaceReload a folder of the "
                "trainer's own; vLLM reloads from it (reload_weights' weights_path)"
            )


def write_safetensors(policy_dir: Path, tensors: Iterable[tuple[str, object]]) -> int:
    """Write named tensors over the trainer's checkpoint (`model.safetensors` in `policy_dir`,
    created if absent): tensors it already has are replaced, the rest kept. Returns how many
    were written."""
    import torch
    from safetensors.torch import load_file, save_file

    policy_dir.mkdir(parents=True, exist_ok=True)
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

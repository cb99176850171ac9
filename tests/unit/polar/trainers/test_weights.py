"""Weights move into a folder of the trainer's own, never over the folder vLLM serves
(polar/trainers/weights.py): `from_settings` refuses `POLAR_MODEL_DIR`, a sync refuses the
folder a vLLM names as its model's root.

The syncs themselves, against the real vLLM: tests/system/test_trl_rollout_func.py and
tests/system/test_grpo_example.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from polar.settings import Settings
from polar.trainers.weights import InPlaceReload
from tests.support.scripted_backend import serve_app


def test_weights_are_never_written_over_the_folder_vllm_serves(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    settings = Settings(model_dir=served, admin_token="a-long-enough-admin-token-for-tests")
    with pytest.raises(ValueError, match="the folder vLLM serves"):
        InPlaceReload.from_settings(settings, served)
    with pytest.raises(ValueError, match="the folder vLLM serves"):
        InPlaceReload.from_settings(settings, tmp_path / "x" / ".." / "served")
    assert InPlaceReload.from_settings(settings, tmp_path / "policy").policy_dir.name == "policy"
    # a vLLM's own answer names the folder it serves (its model's root)
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "policy", "root": str(served)}]}

    with serve_app(app) as url:
        pointed = InPlaceReload(served, vllm_urls=[url], admin_urls=[], admin_token="t")
        with pytest.raises(ValueError, match="the folder vLLM serves"):
            pointed.sync(lambda path: (path / "model.safetensors").write_bytes(b"overwritten"))
        assert not (served / "model.safetensors").exists()
        own = InPlaceReload(tmp_path / "policy", vllm_urls=[url], admin_urls=[], admin_token="t")
        own.check_not_served()


def test_vllm_is_told_an_absolute_folder_and_a_failed_reload_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM resolves the folder in its own working directory: a relative `policy_dir` (the TRL
    page's `runs/policy`) reaches it absolute. A reload vLLM refuses raises with its answer."""
    asked: list[str] = []
    app = FastAPI()

    @app.post("/collective_rpc")
    def rpc(body: dict[str, Any]) -> Any:
        path = body["kwargs"]["weights_path"]
        asked.append(path)
        if not Path(path).is_absolute():
            raise RuntimeError("no such folder")  # what vLLM's 500 carries
        raise ValueError(f"cannot load {path}: no safetensors")

    monkeypatch.chdir(tmp_path)
    reload = InPlaceReload(Path("runs/policy"), vllm_urls=[], admin_urls=[], admin_token="t")
    assert reload.policy_dir == tmp_path / "runs" / "policy"
    with serve_app(app) as url:
        reload.vllm_urls = [url]
        with pytest.raises(RuntimeError, match=r"could not reload .*runs/policy \(500\)"):
            reload.reload()
    assert asked == [str(tmp_path / "runs" / "policy")]

"""What every trainer check asserts: the trained tokens are the tokens vLLM sampled.

Two links, each exact: a trace's mask-1 tokens and their logprobs are, in order, the sampled
tokens of the CompletionRecords it names; and each of those records is an answer the recording
tap saw vLLM give (prompt ids, sampled ids, float logprobs), independently of the gateway.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from polar.records import Trace
from polar.storage import Storage
from tests.support.tap import Tap

REPO = Path(__file__).resolve().parents[2]


def masked(values: Sequence[float] | Sequence[int], mask: Sequence[int]) -> list[float | int]:
    """The values where `mask` is 1."""
    return [v for v, m in zip(values, mask, strict=True) if m]


def float32(values: Sequence[float]) -> list[float]:
    """What a float32 tensor of `values` holds (verl's rollout_log_probs)."""
    return [float(v) for v in np.asarray(values, dtype=np.float32)]


def assert_sampled_by_vllm(trace: Trace, storage: Storage, tap: Tap) -> int:
    """The trace's mask-1 tokens are its records' sampled tokens, which vLLM sampled (the tap);
    returns how many tokens were compared."""
    records = {r.record_id: r for r in storage.list_completions(trace.provenance.session_id)}
    members = sorted((records[rid] for rid in trace.provenance.record_ids), key=lambda r: r.seq)
    sampled = set(tap.sampled())
    ids: list[int] = []
    logprobs: list[float] = []
    for record in members:
        assert record.prompt_token_ids and record.response_token_ids is not None
        assert record.response_logprobs is not None
        triple = (
            tuple(record.prompt_token_ids),
            tuple(record.response_token_ids),
            tuple(record.response_logprobs),
        )
        assert triple in sampled, f"record {record.record_id} is not an answer vLLM gave"
        ids += record.response_token_ids
        logprobs += record.response_logprobs
    assert masked(trace.response_ids, trace.loss_mask) == ids
    assert masked(trace.response_logprobs, trace.loss_mask) == logprobs  # bit for bit
    return len(ids)


def trainers_python() -> Path:
    """.venv-trainers' python, built (cached) by scripts/setup_trainer_venv.sh."""
    script = REPO / "scripts" / "setup_trainer_venv.sh"
    proc = subprocess.run(
        ["bash", str(script), "--install-only"], capture_output=True, text=True, cwd=REPO
    )
    if proc.returncode != 0:
        raise RuntimeError(f"setup_trainer_venv failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return REPO / ".venv-trainers" / "bin" / "python"


async def run_logged(
    argv: list[str], env: dict[str, str], timeout_s: float, cwd: Path = REPO
) -> str:
    """Run `argv` in `cwd` without blocking the event loop (the suite's worker runs on it); its
    output, or an assertion error carrying the output's tail."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
        raise AssertionError(f"{argv[:3]} ran past {timeout_s}s:\n{out.decode()[-4000:]}") from None
    output = out.decode(errors="replace")
    assert proc.returncode == 0, f"{argv[:3]} exited {proc.returncode}:\n{output[-4000:]}"
    return output

"""One definition of a trace, in the trainer bridges: each bridge hands its trainer the SDK
`Trace`'s token ids, loss mask and logprobs token for token, a mask named `loss_mask` is over
the response, and a whole-sequence mask is the trainer's own name for it (TRL's
`completion_mask`). verl's agent loop is checked where verl imports (`.venv-trainers`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from polar.contracts import SessionResult, TaskResult
from polar.records import Trace
from polar.trainers._sessions import SessionRun, chains, trainable
from polar.trainers.slime import session_samples
from polar.trainers.trl import GroupRun, PolarRolloutFunc, rollout_samples
from tests.support.slime_standin import slime_api
from tests.support.trace_samples import Holds, Over, expected, sdk_traces

TEMPLATE = {"task_id": "t1", "harness": {"kind": "command", "command": "python agent.py"}}


@dataclass(frozen=True)
class Handed:
    """What one bridge handed its trainer for one trace: named per-token values, each with
    what it holds and what it is aligned with."""

    trace_id: str
    columns: dict[str, tuple[Holds, Over, list[Any]]]


def sessions() -> list[tuple[SessionResult, list[Trace]]]:
    """Each session of `sdk_traces` with its result (reward and status as its traces say)."""
    by_session: dict[str, list[Trace]] = {}
    for trace in sdk_traces():
        by_session.setdefault(trace.provenance.session_id, []).append(trace)
    out = []
    for index, (sid, traces) in enumerate(by_session.items()):
        first = traces[0]
        assert first.status is not None
        result = SessionResult(
            session_id=sid,
            task_id="t1",
            index=index,
            status=first.status,
            reward=first.reward,
            harness="command",
            traces_key=f"sessions/{sid}/traces/prefix_merging.jsonl",
        )
        out.append((result, traces))
    return out


def runs() -> list[SessionRun]:
    """The trainable sessions, as the bridges get them."""
    pairs = sessions()
    task = TaskResult(task_id="t1", sessions=[s for s, _ in pairs])
    return [SessionRun(task, "wf-t1", s, traces) for s, traces in pairs if trainable(s)]


def slime_bridge() -> list[Handed]:
    """slime's rollout function: one `Sample` per chain of a trainable session."""
    sample_class = slime_api().sample
    handed = []
    for run in runs():
        base = sample_class(group_index=0, index=0, prompt=[])
        for sample in session_samples(base, run):
            handed.append(
                Handed(
                    sample.metadata["polar"]["trace_id"],
                    {
                        "tokens": ("ids", "sequence", sample.tokens),
                        "loss_mask": ("mask", "response", sample.loss_mask),
                        "rollout_log_probs": ("logprobs", "response", sample.rollout_log_probs),
                    },
                )
            )
    return handed


def trl_rollout_func_bridge() -> list[Handed]:
    """TRL's `GRPOTrainer` rollout function: each trainable session's root chain."""
    pairs = sessions()
    group = GroupRun("wf-t1", TaskResult(task_id="t1", sessions=[s for s, _ in pairs]), pairs)
    trainer = type("Trainer", (), {"processing_class": type("Tok", (), {"eos_token_id": 2})})
    rows = PolarRolloutFunc(TEMPLATE, prefetch=False).rows([group], trainer)
    return [
        Handed(
            trace_id,
            {
                "prompt_ids": ("ids", "prompt", rows["prompt_ids"][i]),
                "completion_ids": ("ids", "response", rows["completion_ids"][i]),
                "env_mask": ("mask", "response", rows["env_mask"][i]),
                "logprobs": ("logprobs", "response", rows["logprobs"][i]),
            },
        )
        for i, trace_id in enumerate(rows["polar_trace_id"])
        if trace_id is not None  # an untrainable session's filler row
    ]


def trl_async_bridge() -> list[Handed]:
    """TRL's async GRPO worker: a `RolloutSample` per trace that has a sampled token."""
    traces = [t for run in runs() for t in chains(run.traces)]
    advantages: dict[str, float | None] = {t.trace_id: 1.0 for t in traces}
    samples = rollout_samples(traces, advantages, group_id=0, model_version=0, prompt=[])
    kept = [t for t in traces if any(t.loss_mask)]
    return [
        Handed(
            trace.trace_id,
            {
                "input_ids": ("ids", "sequence", sample.input_ids.tolist()),
                "completion_mask": ("mask", "sequence", sample.completion_mask.tolist()),
                "old_log_probs": ("logprobs", "sequence", sample.old_log_probs.tolist()),
            },
        )
        for trace, sample in zip(kept, samples, strict=True)
    ]


def verl_bridge() -> list[Handed]:
    """verl's agent loop: each trainable session's root chain as an `AgentLoopOutput`."""
    pytest.importorskip("verl", reason="verl is in .venv-trainers only")
    from polar.trainers.verl import agent_loop_output

    handed = []
    for run in runs():
        output = agent_loop_output(run)
        handed.append(
            Handed(
                output.extra_fields["polar"]["trace_id"],
                {
                    "prompt_ids": ("ids", "prompt", output.prompt_ids),
                    "response_ids": ("ids", "response", output.response_ids),
                    "response_mask": ("mask", "response", output.response_mask),
                    "response_logprobs": ("logprobs", "response", output.response_logprobs),
                },
            )
        )
    return handed


FLOAT32 = {"old_log_probs"}
"""Columns the bridge hands as float32 (TRL's `RolloutSample.old_log_probs`)."""
BRIDGES: dict[str, Callable[[], list[Handed]]] = {
    "slime": slime_bridge,
    "trl-rollout-func": trl_rollout_func_bridge,
    "trl-async": trl_async_bridge,
    "verl": verl_bridge,
}


@pytest.mark.parametrize("bridge", list(BRIDGES))
def test_each_bridge_hands_the_sdks_ids_mask_and_logprobs_token_for_token(bridge: str) -> None:
    traces = {t.trace_id: t for t in sdk_traces()}
    handed = BRIDGES[bridge]()
    assert handed, bridge
    for item in handed:
        trace = traces[item.trace_id]
        masks = [name for name, (holds, _, _) in item.columns.items() if holds == "mask"]
        assert len(masks) == 1
        for name, (holds, over, values) in item.columns.items():
            want = expected(trace, holds, over)
            if name in FLOAT32:
                want = np.asarray(want, np.float32).tolist()
            assert values == want, (bridge, item.trace_id, name)
            if name == "loss_mask":
                assert over == "response", bridge

"""Runs verl 0.9.1's own agent-loop worker on rows whose agent is `polar` (in .venv-trainers).

    .venv-trainers/bin/python -m tests.system.verl_driver AGENT_LOOP_YAML OUT_DIR --rows 2 \\
        --model .polar/models/tiny-qwen3

verl's path, unchanged: its Hydra trainer config (`verl/trainer/config/ppo_trainer.yaml`)
composed with overrides; its agent-loop config file (`rollout.agent.agent_loop_config_path`)
(AGENT_LOOP_YAML: the verl page's, docs/trainers-verl.md)
naming `polar` with the task template; `default_agent_loop=polar`, so rows without an
`agent_name` resolve to it; `AgentLoopWorker.generate_sequences` on a `DataProto`, which looks
`polar` up in verl's registry, instantiates it with Hydra, runs it, pads and stacks the outputs.
Writes OUT_DIR/verl_rows.json: each row of the batch verl returned, unpadded by its attention
mask, as verl holds it (token ids, response mask, float32 rollout logprobs, rm_scores,
__num_turns__, extra fields), plus the registry entry `@register` made and the seconds taken.
The Polar settings come from the POLAR_* environment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any


def compose(model: Path, loop_config: Path) -> Any:
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra_compose(
            config_name="ppo_trainer",
            overrides=[
                f"actor_rollout_ref.model.path={model}",
                "actor_rollout_ref.rollout.name=vllm",
                "actor_rollout_ref.rollout.prompt_length=4096",
                "actor_rollout_ref.rollout.response_length=4096",
                "actor_rollout_ref.rollout.agent.default_agent_loop=polar",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_config}",
            ],
        )


def rows_of(out: Any) -> list[dict[str, Any]]:
    """verl's returned batch, row by row, without its padding."""
    batch, extra = out.batch, out.non_tensor_batch
    width = batch["prompts"].shape[1]
    rows = []
    for i in range(len(out)):
        attention = batch["attention_mask"][i]
        prompt_on = attention[:width].bool()
        response_on = attention[width:].bool()
        row: dict[str, Any] = {
            "prompt_ids": batch["prompts"][i][prompt_on].tolist(),
            "response_ids": batch["responses"][i][response_on].tolist(),
            "response_mask": batch["response_mask"][i][response_on].tolist(),
            "rollout_log_probs": batch["rollout_log_probs"][i][response_on].tolist(),
            "rollout_log_probs_dtype": str(batch["rollout_log_probs"].dtype),
            "input_ids_match": bool(
                (batch["input_ids"][i][attention.bool()]).tolist()
                == batch["prompts"][i][prompt_on].tolist()
                + batch["responses"][i][response_on].tolist()
            ),
            "num_turns": int(extra["__num_turns__"][i]),
            "polar": extra["polar"][i],
            "min_global_steps": extra["min_global_steps"][i],
            "max_global_steps": extra["max_global_steps"][i],
            "metrics": out.meta_info["metrics"][i],
        }
        if "rm_scores" in batch.keys():  # noqa: SIM118  (a TensorDict)
            scores = batch["rm_scores"][i][response_on]
            nonzero = scores.nonzero().flatten().tolist()
            row["rm_scores_nonzero"] = {str(j): float(scores[j]) for j in nonzero}
            row["rm_score_last"] = float(scores[-1])
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("loop_config", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--model", type=Path, required=True)
    args = parser.parse_args()

    import numpy as np
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop import AgentLoopWorker
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.protocol import DataProto

    import polar.trainers.verl  # noqa: F401  (registers `polar`)

    registered = dict(_agent_loop_registry["polar"])
    loop_config = args.loop_config
    (entry,) = OmegaConf.to_container(OmegaConf.load(loop_config))  # type: ignore[misc]
    config = compose(args.model, loop_config)
    worker = AgentLoopWorker(config, llm_client=None)
    instruction = json.loads(Path(entry["task"]).read_text())["instruction"]
    prompt = [{"role": "user", "content": instruction}]
    batch = DataProto.from_dict(
        non_tensors={
            "raw_prompt": np.array([prompt] * args.rows, dtype=object),
            "index": np.arange(args.rows),
        },
    )
    started = time.monotonic()
    out = asyncio.run(worker.generate_sequences(batch))
    seconds = time.monotonic() - started
    report = {
        "registered": registered,
        "resolved": dict(OmegaConf.to_container(_agent_loop_registry["polar"])),
        "seconds": seconds,
        "rows": rows_of(out),
        "pid": os.getpid(),
    }
    (args.out / "verl_rows.json").write_text(json.dumps(report, default=str))


if __name__ == "__main__":
    main()

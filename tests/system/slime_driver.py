"""Calls Polar's slime rollout function the way slime's rollout manager does.

    .venv/bin/python -m tests.system.slime_driver POLAR_YAML OUT_DIR --prompts 1 \\
        --samples-per-prompt 2 --rollout-id 3 --model .polar/models/tiny-qwen3

Where slime imports (a checkout on PYTHONPATH), slime's own path: its `Sample` class,
`slime.rollout.base_types.call_rollout_fn` calling `polar.trainers.slime.generate_rollout`,
`validate_rollout_id_annotated` on the nested output, then the manager's flattening
(`while isinstance(data[0], list)`); and where its data source imports too (it needs ray:
.venv-trainers), slime's own `RolloutDataSource` reading a prompt file with the model's
tokenizer. Elsewhere the stand-in `Sample` (tests/support/slime_standin.py), a direct call, and
a source that groups prompts as slime's `RolloutDataSource.get_samples` does.
POLAR_YAML is the `--custom-config-path` file (the slime page's, docs/trainers-slime.md): each
of its keys is set on slime's args, as slime does.
Writes OUT_DIR/slime_samples.json: each sample's `to_dict()`, the nesting slime got, the
metrics and whether slime's own code ran.
The Polar settings come from the POLAR_* environment.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import yaml

from polar.trainers.slime import generate_rollout
from tests.support.slime_standin import GroupingSource, slime_api


def data_source(args: argparse.Namespace, instruction: str, sample_class: Any) -> Any:
    """slime's own `RolloutDataSource` where it imports, else the grouping stand-in."""
    try:
        from slime.rollout.data_source import RolloutDataSource
    except ImportError:
        prompt = [{"role": "user", "content": instruction}]
        return GroupingSource(sample_class, [prompt], args.samples_per_prompt)
    prompts = args.out / "prompts.jsonl"
    prompts.write_text(json.dumps({"text": instruction}) + "\n")
    return RolloutDataSource(
        argparse.Namespace(
            rollout_global_dataset=True,
            prompt_data=str(prompts),
            hf_checkpoint=str(args.model),
            dump_details=None,
            rollout_max_prompt_len=None,
            input_key="text",
            multimodal_keys=None,
            label_key=None,
            metadata_key="metadata",
            tool_key=None,
            apply_chat_template=False,
            apply_chat_template_kwargs=None,
            rollout_seed=42,
            rollout_shuffle=False,
            n_samples_per_prompt=args.samples_per_prompt,
        )
    )


def depth(node: Any) -> int:
    return 1 + depth(node[0]) if isinstance(node, list) and node else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--prompts", type=int, default=1)
    parser.add_argument("--samples-per-prompt", type=int, default=2)
    parser.add_argument("--rollout-id", type=int, default=0)
    parser.add_argument("--model", type=Path, required=True)
    args = parser.parse_args()

    api = slime_api()
    # slime's args as its --custom-config-path YAML leaves them (setattr per key)
    slime_args = argparse.Namespace(
        rollout_batch_size=args.prompts, n_samples_per_prompt=args.samples_per_prompt
    )
    for key, value in yaml.safe_load(args.config.read_text()).items():
        setattr(slime_args, key, value)
    instruction = json.loads(Path(slime_args.polar_task).read_text())["instruction"]
    source = data_source(args, instruction, api.sample)
    started = time.monotonic()
    if api.real:
        from slime.rollout.base_types import call_rollout_fn

        output = call_rollout_fn(
            generate_rollout, slime_args, args.rollout_id, source, evaluation=False
        )
        data, metrics = output.samples, output.metrics
        assert api.validate_rollout_id_annotated is not None
        api.validate_rollout_id_annotated(data)
    else:
        data, metrics = generate_rollout(slime_args, args.rollout_id, source), None
    seconds = time.monotonic() - started
    nesting = depth(data)
    shape = [[len(session) for session in group] for group in data]
    while isinstance(data[0], list):  # slime's RolloutManager._get_rollout_data
        data = list(itertools.chain.from_iterable(data))
    report = {
        "slime": api.real,
        "sample_class": f"{api.sample.__module__}.{api.sample.__qualname__}",
        "data_source": f"{type(source).__module__}.{type(source).__qualname__}",
        "seconds": seconds,
        "depth": nesting,
        "shape": shape,
        "metrics": metrics,
        "samples": [
            {**s.to_dict(), "status": s.status.value, "class": type(s).__qualname__} for s in data
        ],
    }
    (args.out / "slime_samples.json").write_text(json.dumps(report, default=str))


if __name__ == "__main__":
    main()

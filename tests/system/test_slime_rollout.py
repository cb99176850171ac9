"""slime's rollout function runs Polar sessions and hands slime their traces exactly.

`polar.trainers.slime.generate_rollout` is called as slime's rollout manager calls it
(tests/system/slime_driver.py), with the slime page's config file as written (the task's path
filled in): one prompt group of two samples from a data source that groups
as slime's does; one Polar task of two sessions on the real stack (Temporal, S3, the gateway
process, the real vLLM behind a recording tap). Every sample must be one of the sessions'
chains, token for token, with the sampled logprobs bit for bit, the mask, the session's reward,
slime's group and sample ids, the policy version (the rollout id) and the session's status.

slime is not on PyPI: the driver uses slime's own `Sample`, `call_rollout_fn` and
`validate_rollout_id_annotated` when `SLIME_CHECKOUT` names a slime checkout, and slime's own
`RolloutDataSource` too when `SLIME_PYTHON` names a Python with ray (.venv-trainers/bin/python);
THUDM/slime 624b824a was checked so by hand. Otherwise: the stand-in `Sample` with slime's
documented fields (tests/support/slime_standin.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from app.cli.demo import demo_task
from app.devstack import DevStack
from polar.client.sdk import PolarClient
from polar.trainers._sessions import chains
from polar.trainers.slime_layout import SLIME_SAMPLE_FIELDS, SLIME_STATUS
from tests.support.doc_blocks import doc_block, filled
from tests.support.tap import Tap
from tests.system.trainer_checks import REPO, assert_sampled_by_vllm, run_logged

pytestmark = pytest.mark.slow
ROLLOUT_ID = 3


async def test_slime_rollout_function_returns_polar_traces_exact_to_the_token(
    devstack: DevStack,
    polar: PolarClient,
    gateway: str,
    tap: Tap,
    model_dir: Path,
    tmp_path: Path,
) -> None:
    spec = demo_task(sessions=1).model_copy(deep=True)
    spec.builder.name = "prefix_merging"
    task = tmp_path / "task.json"
    task.write_text(spec.model_dump_json())
    path = [str(REPO), *filter(None, [os.environ.get("SLIME_CHECKOUT")])]
    env = {**os.environ, **devstack.env(), "PYTHONPATH": os.pathsep.join(path)}
    python = os.environ.get("SLIME_PYTHON", sys.executable)
    # the slime page's --custom-config-path file, the task's path filled in as a user would
    config = tmp_path / "polar.yaml"
    config.write_text(
        filled(doc_block("slime polar.yaml", "yaml"), {"/path/to/task.json": str(task)})
    )
    argv = [python, "-m", "tests.system.slime_driver", str(config), str(tmp_path)]
    argv += ["--prompts", "1", "--samples-per-prompt", "2", "--rollout-id", str(ROLLOUT_ID)]
    argv += ["--model", str(model_dir)]
    await run_logged(argv, env, timeout_s=500)
    report = json.loads((tmp_path / "slime_samples.json").read_text())
    if os.environ.get("SLIME_CHECKOUT"):
        assert report["slime"] and report["sample_class"] == "slime.utils.types.Sample"
        if os.environ.get("SLIME_PYTHON"):
            assert report["data_source"] == "slime.rollout.data_source.RolloutDataSource"

    samples = report["samples"]
    assert report["depth"] == 3  # prompt × session × chain
    assert [len(group) for group in report["shape"]] == [2]
    assert len(samples) == sum(report["shape"][0])
    by_session: dict[str, list[dict[str, Any]]] = {}
    for sample in samples:
        assert set(sample) - {"class"} <= SLIME_SAMPLE_FIELDS
        by_session.setdefault(sample["session_id"], []).append(sample)
    assert len(by_session) == 2
    workflow_ids = {s["metadata"]["polar"]["workflow_id"] for s in samples}
    assert len(workflow_ids) == 1  # one Polar task for the group
    (workflow_id,) = workflow_ids
    result = await polar.wait(workflow_id)
    assert result.policy_version == ROLLOUT_ID and len(result.sessions) == 2
    compared = 0
    for session in result.sessions:
        ordered = chains(polar.load_traces(session))
        got = by_session[session.session_id]
        assert [s["metadata"]["polar"]["trace_id"] for s in got] == [t.trace_id for t in ordered]
        assert len({s["index"] for s in got}) == 1
        assert {s["rollout_id"] for s in got} == {got[0]["index"]}
        for sample, chain in zip(got, ordered, strict=True):
            # what slime holds is Polar's chain, exactly
            assert sample["tokens"] == chain.prompt_ids + chain.response_ids
            assert sample["response_length"] == len(chain.response_ids)
            assert sample["loss_mask"] == chain.loss_mask
            assert sample["rollout_log_probs"] == chain.response_logprobs  # JSON floats: exact
            compared += assert_sampled_by_vllm(chain, polar.storage, tap)
            # the reward, version, status and group are the session's
            assert session.reward is not None and sample["reward"] == session.reward
            assert chain.provenance.policy_version == ROLLOUT_ID
            assert sample["weight_versions"] == [str(ROLLOUT_ID)]
            assert sample["status"] == SLIME_STATUS[session.status]
            assert sample["group_index"] == 0 and sample["remove_sample"] is False
            assert sample["metadata"]["polar"]["chains"] == len(ordered)
    assert {min(s["index"] for s in got) for got in by_session.values()} == {0, 1}
    if report["metrics"] is not None:
        assert report["metrics"]["polar/sessions"] == 2.0
    assert compared > 0
    how = "slime's own Sample" if report["slime"] else "the stand-in Sample"
    print(
        f"slime: 2 sessions, {len(samples)} samples, {compared} sampled tokens compared, {how}, "
        f"{report['data_source']}, {report['seconds']:.1f} s"
    )

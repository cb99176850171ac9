"""slime's rollout function never turns an untrainable session into a zero-reward `Sample`.

On the real Temporal dev server and S3: a prompt group whose sessions end without a reward (no
evaluator) is run again as one more Polar task, and after `max_attempts` tasks the rollout
raises, naming each session and why; the group's `Sample`s are left unfilled.
"""

from __future__ import annotations

import pytest

from polar.client.sdk import PolarClient
from polar.trainers.slime import RolloutConfig, RolloutStats, rollout_group
from tests.support.slime_standin import GroupingSource, slime_api


async def test_sessions_without_a_reward_are_rerun_then_the_rollout_fails(
    polar: PolarClient,
) -> None:
    template = {
        "task_id": "slime-noreward",
        "harness": {"kind": "command", "command": "true"},
        "evaluator": {"kind": "none"},
        "timeouts": {"harness_s": 60, "heartbeat_s": 20},
    }
    config = RolloutConfig(task=template, max_attempts=2, timeout_s=300)
    api = slime_api()
    (group,) = GroupingSource(api.sample, ["say hi"], 2).get_samples(1)
    stats = RolloutStats()
    with pytest.raises(RuntimeError, match="after 2 tasks") as failure:
        await rollout_group(polar, config, group, 1, stats)
    # two tasks of two sessions each ran; every session is named with its reason
    assert stats.sessions == 4 and stats.samples == 0
    reasons = str(failure.value).split(" tasks: ", 1)[1].split("; ")
    assert len(reasons) == 4 and all(r.startswith("slime-noreward-") for r in reasons), reasons
    for sample in group:
        assert sample.tokens == [] and sample.reward is None and sample.rollout_log_probs is None

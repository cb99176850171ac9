"""slime's rollout function never turns an untrainable session into a zero-reward `Sample`.

On the real Temporal dev server and S3: a prompt group whose sessions end without a reward (no
evaluator) is run again as one more Polar task (`polar_min_scored: null`: always rerun), and
after `max_attempts` tasks the rollout raises `UnscoredBatch`, naming the count and why; with
the default `polar_min_scored: 0.0` it raises after the first task, none of whose sessions was
scored. The group's `Sample`s are left unfilled.
"""

from __future__ import annotations

import pytest

from polar.client.sdk import PolarClient
from polar.trainers._sessions import UnscoredBatch
from polar.trainers.slime import (
    GroupRollout,
    RolloutConfig,
    RolloutStats,
    check_rollout,
    rollout_group,
)
from tests.support.slime_standin import GroupingSource, slime_api

TEMPLATE = {
    "task_id": "slime-noreward",
    "harness": {"kind": "command", "command": "true"},
    "evaluator": {"kind": "none"},
    "timeouts": {"harness_s": 60, "heartbeat_s": 20},
}


@pytest.mark.parametrize(("min_scored", "tasks"), [(None, 2), (0.0, 1)])
async def test_sessions_without_a_reward_are_rerun_then_the_rollout_fails(
    polar: PolarClient, min_scored: float | None, tasks: int
) -> None:
    config = RolloutConfig(task=TEMPLATE, max_attempts=2, min_scored=min_scored, timeout_s=300)
    stats = RolloutStats()
    state = None

    async def go() -> None:
        nonlocal state, stats
        api = slime_api()
        (group,) = GroupingSource(api.sample, ["say hi"], 2).get_samples(1)
        state = GroupRollout(list(group))
        for attempt in range(config.max_attempts):
            await rollout_group(polar, config, state, 1, stats, attempt)
            check_rollout([state], config, attempt)

    with pytest.raises(UnscoredBatch) as failure:
        await go()
    # `tasks` tasks of two sessions each ran, none scored; the message says so and why
    assert stats.sessions == 2 * tasks and stats.samples == 0
    message = str(failure.value)
    assert f"(after {tasks} of 2 tasks per group): 0 of 2 sessions scored" in message, message
    assert "2 × no reward" in message, message
    assert failure.value.labels == {"no reward": 2}
    assert state is not None and sorted(state.why) == [0, 1] and state.pending == [0, 1]
    for sample in state.group:
        assert sample.tokens == [] and sample.reward is None and sample.rollout_log_probs is None

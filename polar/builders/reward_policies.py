"""How a session's outcome reward and terminal status reach its traces (`score_traces`).

Policies (builder config `reward`, stamped on each trace's provenance):

* `broadcast` (default): every trace gets the session's reward.
* `session_normalized`: every trace gets reward / number of the session's
  traces, so a session's traces together carry its reward once. Broadcasting
  to many per-request traces multiplies a session's weight by its call count,
  which rewards making more calls; normalising removes that incentive.

Per-trace rewards: an evaluator may reward traces one by one (the `command`
evaluator reads them from the reward file it writes); those traces keep the
reward it gave, the rest follow the policy.

Failed and timed-out sessions (`harness_failed`, `timeout`): the evaluator
still ran on what the harness left, so its reward is applied under the same
policy; masks are left as built (every sampled token is real policy output),
and each trace carries the session `status` so a trainer can drop, down-weight
or keep them. Sessions whose evaluator did not run (`error`, `cancelled`, or
no evaluator) get reward None: a trainer must not treat them as 0.

Group advantages under these policies (graded sessions in the baseline, unscored
ones None, `session_normalized` advantages split like the reward): polar/advantages.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from polar.builders.base import RewardPolicy
from polar.records import SessionStatus, Trace


def trace_reward(reward: float | None, num_traces: int, policy: RewardPolicy) -> float | None:
    """The reward one of `num_traces` traces of a session gets under `policy`."""
    if reward is None:
        return None
    if policy == "session_normalized":
        return reward / num_traces if num_traces else reward
    return reward


def assign_rewards(
    traces: list[Trace],
    reward: float | None,
    status: SessionStatus,
    trace_rewards: Mapping[str, float] | None = None,
) -> None:
    """Write rewards and the session status into `traces`.

    A trace the evaluator rewarded itself (`trace_rewards`, by trace id) gets
    that reward as given; the others get the session's reward under their
    `reward_policy`.
    """
    own = trace_rewards or {}
    for trace in traces:
        if trace.trace_id in own:
            trace.reward = own[trace.trace_id]
        else:
            trace.reward = trace_reward(reward, len(traces), trace.provenance.reward_policy)
        trace.status = status

"""TRL 1.16: Polar as `GRPOTrainer`'s rollout function, and as `AsyncGRPOTrainer`'s rollout
worker and weight transfer; `polar export`'s TRL rows beside them.

* `rollout_func.py`: `GRPOTrainer(rollout_func=PolarRolloutFunc(...), reward_funcs=polar_reward)`;
  `rollout_state.py`: what it keeps between calls.
* `async_worker.py`: `AsyncGRPOTrainer(rollout_worker=PolarRolloutWorker(...))`.
* `weight_transfer.py`: `AsyncGRPOTrainer(weight_transfer=PolarWeightTransfer(...))`.
* `loop_thread.py`: the asyncio loop on a thread of its own where both keep Polar's client.
* `layout.py`: the `trl.jsonl` rows of `polar export`.
"""

from polar.trainers.trl.async_worker import (
    PolarRolloutWorker,
    StalePolicy,
    WorkerCounts,
    rollout_samples,
)
from polar.trainers.trl.rollout_func import PolarRolloutFunc, polar_reward, prompt_text
from polar.trainers.trl.rollout_state import GroupRun, Prefetched, RolloutStats
from polar.trainers.trl.weight_transfer import PolarWeightTransfer

__all__ = [
    "GroupRun",
    "PolarRolloutFunc",
    "PolarRolloutWorker",
    "PolarWeightTransfer",
    "Prefetched",
    "RolloutStats",
    "StalePolicy",
    "WorkerCounts",
    "polar_reward",
    "prompt_text",
    "rollout_samples",
]

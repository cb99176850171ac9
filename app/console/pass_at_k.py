"""pass@1 and pass@k of a task's sessions: the one place the console defines them.

A task is one group of `num_sessions` sessions of one prompt (GRPO's group). Of its
sessions, those that say something about the policy are its samples (`n`: a reward and an
outcome that is not `infra_error` or `task_error`, as in polar.advantages' group baseline),
and a sample is correct (`c`) when its reward reaches the top of the task's
`evaluator.reward_range` (what `polar tasks audit` asks of an oracle). k is the task's
`num_sessions`, capped at n when fewer sessions were scored. pass@k is the unbiased
estimator of Chen et al. 2021 (Codex, eq. 1): 1 - C(n-c, k) / C(n, k), the chance that k
samples drawn without replacement from the n hold at least one correct; pass@1 is c / n.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from polar.advantages import is_verdict
from polar.contracts import SessionResult

DEFAULT_RANGE = (0.0, 1.0)
"""EvaluatorSpec.reward_range's default."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator of n samples of which c are correct (0 < k <= n)."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n, not n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):  # C(n-c, k) / C(n, k) as a product, no big integers
        miss *= 1.0 - k / i
    return 1.0 - miss


@dataclass(frozen=True)
class PassRates:
    """A task's samples (n), correct ones (c), the k used, pass@1 and pass@k."""

    n: int
    c: int
    k: int
    pass_1: float
    pass_k: float


def top_reward(spec: dict[str, Any]) -> float:
    """The top of a task spec's (its start input's) reward range."""
    evaluator = spec.get("evaluator")
    span = evaluator.get("reward_range") if isinstance(evaluator, dict) else None
    if isinstance(span, list | tuple) and len(span) == 2 and isinstance(span[1], int | float):
        return float(span[1])
    return DEFAULT_RANGE[1]


def pass_rates(
    sessions: Iterable[SessionResult], top: float, group_size: int | None
) -> PassRates | None:
    """pass@1 and pass@k of a task's finished sessions (None: no session was scored)."""
    scored = [s.reward for s in sessions if s.reward is not None and is_verdict(s)]
    n = len(scored)
    if n == 0:
        return None
    c = sum(1 for r in scored if r >= top)
    k = min(group_size or n, n)
    return PassRates(n, c, k, pass_at_k(n, c, 1), pass_at_k(n, c, k))

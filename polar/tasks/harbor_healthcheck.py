"""Harbor's `[environment.healthcheck]` as a prepare step: the environment is ready before the
agent starts, as Harbor makes it.

Harbor 0.25 (`BaseEnvironment.run_healthcheck`, after the environment starts and before the
agent's setup) runs the check's `command` with `bash -c` until it exits 0: failures during
`start_period_sec` do not count (the next try `start_interval_sec` later), after it each
failure counts and `retries` consecutive ones fail the trial (the next try `interval_sec`
later); each try is cut at `timeout_sec`. Polar runs the same loop as the runtime's last
prepare command (`CommandAction`), in the agent's runtime and in the evaluator's fresh one;
a check that never passes fails the prepare step (`task_error`: the session never starts, as
Harbor's trial ends with a HealthcheckError).
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from polar.tasks.harbor_toml import HarborTask, HarborTaskError
from polar.tasks.sources import MAX_TIMEOUT_S, CommandAction

__all__ = ["DEFAULTS", "healthcheck_action"]

DEFAULTS: dict[str, float] = {
    "interval_sec": 5.0,
    "timeout_sec": 30.0,
    "start_period_sec": 0.0,
    "start_interval_sec": 5.0,
    "retries": 3,
}
"""Harbor 0.25's `HealthcheckConfig` defaults."""

_LOOP = """\
check={command}
start=$(date +%s); fails=0
cap=""; if command -v timeout >/dev/null 2>&1; then cap="timeout -s KILL {timeout}"; fi
while :; do
    if $cap bash -c "$check"; then exit 0; fi
    if [ $(( $(date +%s) - start )) -lt {start_period} ]; then sleep {start_interval}; continue; fi
    fails=$((fails + 1))
    if [ "$fails" -ge {retries} ]; then
        echo "healthcheck failed after {retries} consecutive retries: $check" >&2
        exit 1
    fi
    sleep {interval}
done
"""


def _number(task: HarborTask, key: str, value: Any, integer: bool = False) -> float:
    where = f"environment.healthcheck.{key}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise HarborTaskError(task.name, where, f"{value!r}: a number")
    if value < 0 or (integer and value != int(value)):
        raise HarborTaskError(
            task.name, where, f"{value!r}: a non-negative {'integer' if integer else 'number'}"
        )
    return value


def healthcheck_action(task: HarborTask, config: Any) -> CommandAction:
    """The prepare command running `[environment.healthcheck]` (`config`) as Harbor does."""
    where = "environment.healthcheck"
    if not isinstance(config, dict):
        raise HarborTaskError(task.name, where, "must be a table")
    unknown = sorted(set(config) - {"command", *DEFAULTS})
    if unknown:
        raise HarborTaskError(task.name, f"{where}.{unknown[0]}", "not a field of Harbor 0.25's")
    command = config.get("command")
    if not isinstance(command, str) or not command.strip():
        raise HarborTaskError(task.name, f"{where}.command", "a shell command is required")
    values = {
        key: _number(task, key, config.get(key, default), integer=key == "retries")
        for key, default in DEFAULTS.items()
    }
    retries = max(1, int(values["retries"]))  # Harbor fails at the first failure with 0 too
    budget = (
        values["start_period_sec"]
        + values["timeout_sec"]
        + retries * (values["timeout_sec"] + values["interval_sec"])
        + 60
    )
    start_tries = values["start_period_sec"] / max(values["start_interval_sec"], 1.0)
    budget += start_tries * values["timeout_sec"]
    return CommandAction(
        command=_LOOP.format(
            command=shlex.quote(command),
            timeout=f"{values['timeout_sec']:g}",
            start_period=math.ceil(values["start_period_sec"]),
            start_interval=f"{values['start_interval_sec']:g}",
            interval=f"{values['interval_sec']:g}",
            retries=retries,
        ),
        timeout_s=min(MAX_TIMEOUT_S, budget),
    )

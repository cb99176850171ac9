"""`SessionResult`s made by hand, for tests of what reads them (bridges, outcome classes)."""

from __future__ import annotations

from polar.contracts import SessionResult
from polar.records import SessionStatus


def session_result(
    sid: str, status: SessionStatus, reward: float | None, **fields: object
) -> SessionResult:
    """Session `sid` of task `t` (index 0, harness `h`) with `status` and `reward`; its traces
    key set where it has a reward. `fields` set the rest."""
    values: dict[str, object] = {
        "session_id": sid,
        "task_id": "t",
        "index": 0,
        "status": status,
        "reward": reward,
        "harness": "h",
        "traces_key": None if reward is None else f"sessions/{sid}/traces.jsonl",
    }
    return SessionResult.model_validate(values | fields)

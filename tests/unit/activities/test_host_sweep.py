"""A host's sweep keeps a runtime while the session it belongs to runs: a session's fresh
runtimes (the evaluator's, a reward_command's, a control grading's and its reward_command's)
belong to the session their id names without the suffixes."""

from __future__ import annotations

import pytest

from activities.host_sweep import owning_session


@pytest.mark.parametrize(
    ("runtime_id", "session"),
    [
        ("t-1-s0", "t-1-s0"),
        ("t-1-s0-eval", "t-1-s0"),
        ("t-1-s0-reward", "t-1-s0"),
        ("t-1-s0-control", "t-1-s0"),
        ("t-1-s0-control-reward", "t-1-s0"),
        ("my-evaluation-s0", "my-evaluation-s0"),
    ],
)
def test_a_fresh_runtime_belongs_to_its_session(runtime_id: str, session: str) -> None:
    assert owning_session(runtime_id) == session

"""The harness launch's own rules (activities/harness_launch.py): the run's key, how a run's
end reads as a status, a reap that failed, and the heartbeat's call count.

The launch itself (channel, relay, run, reap, uploads) runs on real runtimes in
tests/integration/test_run_retry.py and every session test.
"""

from __future__ import annotations

import time

import pytest

from activities.harness_launch import CALL_COUNT_EVERY_S, CallCounter, HarnessRun, session_key
from activities.shell_command import ProcessOutcome
from polar.contracts import HarnessRequest, RuntimeHandle
from polar.session_keys import EXPIRY_MARGIN_S, verify_session_key
from polar.settings import Settings
from polar.tasks.spec import HarnessSpec

SECRET = "a-session-secret-for-the-launch-tests-0123456789"


def request(unknown_models: str = "policy") -> HarnessRequest:
    return HarnessRequest(
        session_id="launch-s0",
        task_id="launch",
        runtime=RuntimeHandle(kind="local", session_id="launch-s0", workdir="/w", host="h"),
        harness=HarnessSpec.model_validate(
            {"kind": "command", "command": "true", "model": "m", "unknown_models": unknown_models}
        ),
        instruction="do it",
        budget_s=300,
    )


def test_the_runs_key_names_its_attempt_and_lives_for_its_budget() -> None:
    settings = Settings(session_secret=SECRET)
    before = time.time()
    identity = verify_session_key(session_key(request(), 3, settings), SECRET)
    assert (identity.session_id, identity.task_id, identity.attempt) == ("launch-s0", "launch", 3)
    assert identity.only_model is None
    assert identity.expires_at is not None
    assert before + 300 + EXPIRY_MARGIN_S - 1 <= identity.expires_at <= time.time() + 900 + 1


def test_a_task_refusing_unknown_models_signs_its_model_into_the_key() -> None:
    settings = Settings(session_secret=SECRET)
    identity = verify_session_key(session_key(request("refuse"), 1, settings), SECRET)
    assert identity.only_model == "m"


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (ProcessOutcome(0, False, 1.0), "completed"),
        (ProcessOutcome(2, False, 1.0), "failed"),
        (ProcessOutcome(None, True, 300.0), "timeout"),
        # past a resource limit: its work is no completed run, whatever its exit code
        (ProcessOutcome(0, False, 1.0, limit_exceeded="disk over 1 GiB"), "failed"),
    ],
)
def test_how_a_run_ends_reads_as_its_status(outcome: ProcessOutcome, status: str) -> None:
    assert HarnessRun(outcome, None, None).status == status


def test_a_failed_reap_fails_the_attempt_naming_why() -> None:
    HarnessRun(ProcessOutcome(0, False, 1.0), None, 2).check_reaped()  # reaped: nothing raised
    cause = OSError("kill: permission denied")
    with pytest.raises(RuntimeError, match="reaping the harness failed: kill") as raised:
        HarnessRun(ProcessOutcome(0, False, 1.0), cause, 2).check_reaped()
    assert raised.value.__cause__ is cause


class CountingStorage:
    """count_completions as S3 answers it, then as an unreachable S3 does."""

    def __init__(self) -> None:
        self.counts = 0
        self.down = False

    def count_completions(self, session_id: str) -> int:
        if self.down:
            raise ConnectionError("S3 unreachable")
        self.counts += 1
        return 10 * self.counts


async def test_the_call_count_is_listed_every_interval_and_an_s3_outage_leaves_it_out() -> None:
    storage = CountingStorage()
    counter = CallCounter(storage, "launch-s0")  # type: ignore[arg-type]
    await counter.tick(0.0)
    assert (storage.counts, counter.calls) == (1, 10)
    await counter.tick(CALL_COUNT_EVERY_S - 0.1)  # a heartbeat, no listing
    assert (storage.counts, counter.calls) == (1, 10)
    await counter.tick(CALL_COUNT_EVERY_S)
    assert (storage.counts, counter.calls) == (2, 20)
    storage.down = True  # the harness runs on; its heartbeat goes without the count
    await counter.tick(2 * CALL_COUNT_EVERY_S)
    assert counter.calls is None

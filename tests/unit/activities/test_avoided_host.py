"""A renewed placement's prepare avoids the host whose own fault ended the last one: a worker
there declines the first `avoid_tries` tries (retried on the shared queue, where another
host's worker can take it) and takes the next, so one host alone still serves the session."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.init_activities import InitActivities
from polar.contracts import PrepareRequest
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import RuntimeSpec


def _request(avoid: list[str], tries: int) -> PrepareRequest:
    return PrepareRequest(
        session_id="s-avoid",
        task_id="t",
        runtime=RuntimeSpec(kind="local"),
        avoid_hosts=avoid,
        avoid_tries=tries,
    )


def _env(attempt: int) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt)
    return env


async def test_the_avoided_host_declines_its_first_tries(tmp_path: Path) -> None:
    settings = Settings(host_id="host-a", data_dir=tmp_path)
    acts = InitActivities(settings, Storage(settings))  # no S3 call is made
    for attempt in (1, 2):
        with pytest.raises(ApplicationError) as caught:
            await _env(attempt).run(acts.prepare_runtime, _request(["host-a"], 2))
        assert caught.value.type == "AvoidedHost" and not caught.value.non_retryable
        assert "host-a" in str(caught.value)


async def test_a_later_try_or_another_host_is_not_declined(tmp_path: Path) -> None:
    """Past its tries (one host alone) or on a host not avoided, prepare goes on: here it
    reaches the runtime, which refuses the request's missing source for what it is."""
    for host, attempt in (("host-a", 3), ("host-b", 1)):
        settings = Settings(host_id=host, data_dir=tmp_path / host)
        acts = InitActivities(settings, Storage(settings))
        try:
            await _env(attempt).run(acts.prepare_runtime, _request(["host-a"], 2))
        except ApplicationError as exc:
            assert exc.type != "AvoidedHost", exc
        except Exception as exc:  # noqa: BLE001 - anything but the decline
            assert "AvoidedHost" not in repr(exc)


def test_the_fields_stay_out_of_the_json_when_unused() -> None:
    dumped = _request([], 0).model_dump(mode="json")
    assert "avoid_hosts" not in dumped and "avoid_tries" not in dumped

"""A session's runtime on a host is removed only by a release of the placement that claimed
it last: an earlier placement's late release (its host given up, then back) leaves a newer
placement's runtime alone, and a claim waits for a removal in progress."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.init_activities import InitActivities
from activities.runtime_claims import RuntimeClaims
from polar.contracts import PrepareRequest
from polar.ids import InvalidId
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import RuntimeSpec


async def test_only_the_last_claim_holds(tmp_path: Path) -> None:
    claims = RuntimeClaims(tmp_path)
    first = await claims.claim("s1")
    second = await claims.claim("s1")
    async with claims.held("s1", first) as mine:
        assert not mine  # a newer placement's: left alone, its claim kept
    async with claims.held("s1", second) as mine:
        assert mine
    assert not (tmp_path / "runtime-claims" / "s1").exists()  # dropped with the runtime
    async with claims.held("s1", first) as mine:
        assert mine  # nothing on record (removed already, or older code): remove as before


async def test_a_claim_waits_for_a_removal_in_progress(tmp_path: Path) -> None:
    claims = RuntimeClaims(tmp_path)
    old = await claims.claim("s1")
    order: list[str] = []

    async def remove() -> None:
        async with claims.held("s1", old) as mine:
            assert mine
            order.append("removing")
            await asyncio.sleep(0.3)
            order.append("removed")

    async def prepare() -> None:
        await asyncio.sleep(0.05)
        await claims.claim("s1")
        order.append("claimed")

    await asyncio.gather(remove(), prepare())
    assert order == ["removing", "removed", "claimed"]
    async with claims.held("s1", old) as mine:
        assert not mine  # the new claim survived the old release


async def test_an_unsafe_session_id_is_never_a_path(tmp_path: Path) -> None:
    with pytest.raises(InvalidId):
        await RuntimeClaims(tmp_path).claim("../escape")


@pytest.mark.skipif(os.geteuid() != 0, reason="the local sandbox needs a root worker")
async def test_a_late_release_leaves_the_new_placement_alone(tmp_path: Path) -> None:
    settings = Settings(host_id="host-a", data_dir=tmp_path)
    acts = InitActivities(settings, Storage(settings))  # no S3 call is made
    env = ActivityEnvironment()
    request = PrepareRequest(session_id="s-claims", task_id="t", runtime=RuntimeSpec())
    earlier = await env.run(acts.prepare_runtime, request)
    newer = await env.run(acts.prepare_runtime, request)  # placed again on the same host
    assert earlier.runtime_id and newer.runtime_id and earlier.runtime_id != newer.runtime_id
    workdir = Path(newer.workdir)
    (workdir / "work.txt").write_text("the new placement's")
    late = await env.run(acts.release_runtime, earlier)
    assert not late.found and (workdir / "work.txt").exists()
    done = await env.run(acts.release_runtime, newer)
    assert done.found and not workdir.exists()


async def test_a_failed_prepare_leaves_no_claim(tmp_path: Path) -> None:
    """A prepare that fails (here: a prepare action that exits 3) drops its claim."""
    settings = Settings(host_id="host-a", data_dir=tmp_path)
    acts = InitActivities(settings, Storage(settings))  # no S3 call is made
    request = PrepareRequest.model_validate(
        {
            "session_id": "s-failed",
            "task_id": "t",
            "runtime": {"prepare": [{"type": "run", "command": "exit 3"}]},
        }
    )
    with pytest.raises(Exception, match="exit"):
        await ActivityEnvironment().run(acts.prepare_runtime, request)
    assert not (tmp_path / "runtime-claims" / "s-failed").exists()

"""The `local` runtime's limits on a root worker, with real processes: the disk watchdog over
a session's dirs (killed mid-run, or told after a quick exit) and the process cap, which is
per session because each session is a uid of its own (a bounded burst of forks at its cap
leaves a neighbour with the same cap forking)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from activities.runtimes.kinds.local import LocalRuntime
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.tasks.spec import DirSource, RuntimeSpec

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the sealed sandbox needs a root worker (CI runs as root)"
)

Session = Callable[..., AbstractAsyncContextManager[tuple[LocalRuntime, RuntimeHandle]]]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    return repo


@pytest.fixture
def session(tmp_path: Path, source: Path) -> Session:
    runtime = LocalRuntime(tmp_path / "runtimes")

    @asynccontextmanager
    async def make(**limits: Any) -> AsyncIterator[tuple[LocalRuntime, RuntimeHandle]]:
        request = PrepareRequest(
            session_id=f"lim-{uuid.uuid4().hex[:8]}",
            task_id="limits",
            runtime=RuntimeSpec.model_validate({"kind": "local", **limits}),
            source=DirSource(path=str(source)),
        )
        handle = await runtime.prepare(request)
        try:
            yield runtime, handle
        finally:
            await runtime.teardown(handle)

    return make


def _log(runtime: LocalRuntime, handle: RuntimeHandle, name: str, which: int) -> str:
    return runtime.log_paths(handle, name)[which].read_text(errors="replace")


async def test_a_session_writing_past_its_disk_limit_is_killed(session: Session) -> None:
    # 4 MiB files (each under the file-size rlimit), 160 MiB in all against 16 MiB
    fill = 'for i in $(seq 40); do head -c 4M /dev/zero > "f$i"; sleep 0.1; done; echo survived'
    async with session(disk="16m") as (runtime, handle):
        outcome = await runtime.run(handle, fill, env={}, log_name="fill", timeout_s=120)
        assert outcome.limit_exceeded and "disk limit exceeded" in outcome.limit_exceeded
        assert outcome.exit_code is None and not outcome.timed_out, outcome
        assert "survived" not in _log(runtime, handle, "fill", 0)
        assert "disk limit exceeded" in _log(runtime, handle, "fill", 1)


async def test_what_a_command_wrote_just_before_it_exited_counts(session: Session) -> None:
    async with session(disk="16m") as (runtime, handle):
        outcome = await runtime.run(
            handle,
            "head -c 12M /dev/zero > a; head -c 12M /dev/zero > b",
            env={},
            log_name="q",
            timeout_s=60,
        )
        assert outcome.exit_code == 0 and outcome.limit_exceeded, outcome
        # under the limit: nothing said
        ok = await runtime.run(
            handle, "rm a b; head -c 4M /dev/zero > c", env={}, log_name="ok", timeout_s=60
        )
        assert ok.exit_code == 0 and ok.limit_exceeded is None, ok


async def test_one_file_past_the_disk_limit_is_refused_by_the_rlimit(session: Session) -> None:
    async with session(disk="16m") as (runtime, handle):
        outcome = await runtime.run(
            handle, "head -c 20M /dev/zero > big", env={}, log_name="big", timeout_s=60
        )
        assert outcome.exit_code != 0, outcome
        assert "File size limit exceeded" in _log(runtime, handle, "big", 1) or (
            outcome.exit_code == 128 + 25  # SIGXFSZ
        )


async def test_a_session_at_its_process_cap_leaves_its_neighbour_forking(
    session: Session,
) -> None:
    # a bounded burst (100 forks: safe if the cap failed; bash retries a refused fork), the
    # neighbour with the same cap
    burst = "for i in $(seq 100); do sleep 2 & done; wait"
    forks = "sleep 1; for i in $(seq 20); do /bin/true || exit 1; done; echo forked"
    async with session(pids=32) as (runtime, a), session(pids=32) as (_, b):
        capped, neighbour = await asyncio.gather(
            runtime.run(a, burst, env={}, log_name="burst", timeout_s=90),
            runtime.run(b, forks, env={}, log_name="forks", timeout_s=90),
        )
        assert "Resource temporarily unavailable" in _log(runtime, a, "burst", 1)  # the cap bit
        assert neighbour.exit_code == 0, _log(runtime, b, "forks", 1)
        assert "forked" in _log(runtime, b, "forks", 0)
        assert "Resource temporarily unavailable" not in _log(runtime, b, "forks", 1)
        assert not capped.timed_out and capped.limit_exceeded is None, capped

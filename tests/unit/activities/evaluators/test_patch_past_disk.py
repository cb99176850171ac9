"""A session's patch larger than the evaluator runtime's disk limit is not copied in: its
changes cannot be applied there, which is the session's doing (reward 0), never an engine
fault (on podman, `podman cp` of such a file into the container failed with "read/write on
closed pipe": infra_error:engine, three placements)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activities.evaluators.baseline import record_baseline
from activities.evaluators.command import CommandReport
from activities.evaluators.fresh import carry_changes
from activities.runtimes.kinds.local import LocalRuntime
from polar.contracts import PrepareRequest
from polar.tasks.spec import DirSource, RuntimeSpec

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the sealed sandbox needs a root worker (CI runs as root)"
)


async def test_a_patch_past_the_disk_limit_is_not_applied(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "hello.txt").write_text("hello\n")
    runtime = LocalRuntime(tmp_path / "runtimes")

    async def prepared(session_id: str, disk: str) -> object:
        request = PrepareRequest(
            session_id=session_id,
            task_id="t",
            runtime=RuntimeSpec(disk=disk),
            source=DirSource(path=str(source)),
        )
        return await record_baseline(runtime, await runtime.prepare(request))

    session = await prepared("big-patch", "64m")
    evaluator = await prepared("big-patch-eval", "16m")
    try:
        write = "head -c 13000000 /dev/urandom | base64 > big.txt"
        outcome = await runtime.run(session, write, env={}, log_name="h", timeout_s=60)
        assert outcome.exit_code == 0
        assert session.baseline and evaluator.baseline
        changes = await carry_changes(runtime, session, session.baseline, runtime, evaluator)
        assert changes.too_large and "larger than the runtime's disk limit" in changes.too_large
        assert not changes.applied and changes.attempts == []
        assert changes.unusable() == changes.too_large
        report = CommandReport()
        changes.fill(report)
        assert report.patch_apply_failed and not report.patch_applied
    finally:
        await runtime.teardown(session)
        await runtime.teardown(evaluator)

"""A retried run stage first kills what its last attempt left in the runtime.

A worker that dies mid-run cannot reap its harness: in a container the harness
and its forwarder live on. The next attempt must not run beside them (their
calls would go through the session's channel as the new attempt's, and the old
forwarder holds the port the new one binds). Here the leftover is a real
process of the session (marked as the local runtime marks its commands) that
keeps appending to a file in the workspace; attempt 2's harness checks that
the file stops growing while it runs. Real parts: the local runtime's sandbox,
the suite's SeaweedFS (the run's logs and its closed marker).
"""

from __future__ import annotations

import dataclasses
import subprocess
import uuid
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from activities.init_activities import InitActivities
from activities.run_activities import RunActivities
from activities.runtimes.kinds.local import SANDBOX_ENV
from activities.runtimes.sandboxes.local_sandbox import SYSTEM_PATH
from polar.contracts import HarnessRequest, PrepareRequest
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import HarnessSpec, RuntimeSpec
from tests.support.polling import wait_until

STILL = 'a=$(wc -l < left.log); sleep 1; b=$(wc -l < left.log); echo "$a $b"; test "$a" = "$b"'


async def test_a_retried_run_first_kills_what_the_last_attempt_left(
    base_settings: Settings, storage: Storage, tmp_path: Path
) -> None:
    settings = base_settings.model_copy(update={"data_dir": str(tmp_path / "data")})
    init, run = InitActivities(settings, storage), RunActivities(settings, storage)
    env = ActivityEnvironment()
    sid = f"retry-{uuid.uuid4().hex[:8]}"
    handle = await env.run(
        init.prepare_runtime,
        PrepareRequest(session_id=sid, task_id="t", runtime=RuntimeSpec(), source=None),
    )
    workspace = Path(handle.workdir)
    left = subprocess.Popen(  # what attempt 1 left when its worker died
        ["bash", "-c", "while :; do echo . >> left.log; sleep 0.05; done"],
        cwd=workspace,
        env={"PATH": SYSTEM_PATH, SANDBOX_ENV: sid},
        start_new_session=True,
    )
    try:
        wait_until(lambda: (workspace / "left.log").exists(), 10, "the leftover writing")
        env.info = dataclasses.replace(env.info, attempt=2)
        request = HarnessRequest(
            session_id=sid,
            task_id="t",
            runtime=handle,
            harness=HarnessSpec(kind="command", command=STILL),
            instruction="check",
            budget_s=60,
        )
        result = await env.run(run.run_harness, request)
        stdout = storage.get_bytes(result.stdout_key).decode()
        assert (result.status, result.exit_code, result.attempt) == ("completed", 0, 2), stdout
        assert left.poll() is not None  # killed, not merely outlived
    finally:
        left.kill()
        left.wait()
        await env.run(init.teardown, handle)

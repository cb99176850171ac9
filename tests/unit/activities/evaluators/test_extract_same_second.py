"""A change made in the same second as the baseline is still extracted: git compares file
times in whole seconds, and only its racy-entry check (against the index's own mtime) sees
a same-size edit of that second; the extraction's copy of the index must keep that mtime."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from activities.evaluators.baseline import record_baseline
from activities.evaluators.patches import extract_patch
from activities.runtimes.kinds.local import LocalRuntime
from polar.contracts import PrepareRequest
from polar.tasks.spec import DirSource, RuntimeSpec

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the sealed sandbox needs a root worker (CI runs as root)"
)


async def test_a_same_size_edit_in_the_baseline_second_is_in_the_patch(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "runtimes")
    missed = []
    for attempt in range(5):  # each try: source, baseline and edit within one second
        source = tmp_path / f"src{attempt}"
        source.mkdir()
        time.sleep(1 - time.time() % 1 + 0.01)  # at the start of a second
        (source / "hello.txt").write_text("hello\n")
        request = PrepareRequest(
            session_id=f"same-second-{uuid.uuid4().hex[:8]}",
            task_id="t",
            runtime=RuntimeSpec(),
            source=DirSource(path=str(source)),
        )
        handle = await record_baseline(runtime, await runtime.prepare(request))
        try:
            outcome = await runtime.run(
                handle, "echo fixed > hello.txt", env={}, log_name="edit", timeout_s=60
            )
            assert outcome.exit_code == 0
            edited = os.stat(Path(handle.workdir) / "hello.txt").st_mtime
            index = os.stat(Path(handle.workdir) / ".git" / "index").st_mtime
            if int(edited) != int(index):
                continue  # the second ended in between: not the case this test is about
            time.sleep(1 - time.time() % 1 + 0.01)  # the extraction's copy: a later second
            assert handle.baseline
            _, files, _ = await extract_patch(runtime, handle, handle.baseline)
            missed.append(files != ["hello.txt"])
        finally:
            await runtime.teardown(handle)
    assert missed, "no try kept the baseline and the edit within one second"
    assert not any(missed), f"an edit of the baseline's second was not extracted: {missed}"

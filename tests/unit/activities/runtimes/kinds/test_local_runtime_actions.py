"""Prepare actions on the `local` runtime (the same spec the docker runtime honours)."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.runtimes import InvalidRuntime, PrepareFailed
from activities.runtimes.kinds.local import LocalRuntime
from polar.contracts import PrepareRequest
from polar.tasks.spec import DirSource, RuntimeSpec


def _request(tmp_path: Path, session_id: str, actions: list[dict]) -> PrepareRequest:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "a.txt").write_text("a\n")
    return PrepareRequest(
        session_id=session_id,
        task_id="t",
        runtime=RuntimeSpec.model_validate({"kind": "local", "prepare": actions}),
        source=DirSource(path=str(repo)),
    )


async def test_upload_and_retried_command(tmp_path: Path) -> None:
    (tmp_path / "extra" / "sub").mkdir(parents=True)
    (tmp_path / "extra" / "sub" / "x.txt").write_text("x\n")
    runtime = LocalRuntime(tmp_path / "runtimes")
    flaky = "test -e tried || { touch tried; exit 1; }; cat vendor/sub/x.txt > done.txt"
    handle = await runtime.prepare(
        _request(
            tmp_path,
            "s1",
            [
                {"type": "upload", "src": str(tmp_path / "extra"), "dest": "vendor"},
                {"type": "run", "command": flaky, "retries": 2},
            ],
        )
    )
    assert (Path(handle.workdir) / "done.txt").read_text() == "x\n"
    await runtime.teardown(handle)


async def test_failing_command_and_escaping_upload_are_refused(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "runtimes")
    with pytest.raises(PrepareFailed, match="exited 4 after 2 attempt"):
        await runtime.prepare(
            _request(tmp_path, "s2", [{"type": "run", "command": "exit 4", "retries": 1}])
        )
    (tmp_path / "f").write_text("f")
    with pytest.raises(InvalidRuntime):
        await runtime.prepare(
            _request(
                tmp_path, "s3", [{"type": "upload", "src": str(tmp_path / "f"), "dest": "/etc/f"}]
            )
        )

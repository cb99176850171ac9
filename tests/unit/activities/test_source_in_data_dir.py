"""A task may never read the stack's data dir (secrets.json, temporal.db, every runtime), even
where a source root holds it (the default root, the worker's cwd, may)."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.init_activities import check_source_roots
from activities.runtimes.base import InvalidSource
from polar.contracts import PrepareRequest
from polar.tasks.spec import DirSource, RuntimeSpec


def _request(path: Path, upload: Path | None = None) -> PrepareRequest:
    prepare = [{"type": "upload", "src": str(upload), "dest": "x"}] if upload else []
    return PrepareRequest(
        session_id="s",
        task_id="t",
        runtime=RuntimeSpec.model_validate({"kind": "local", "prepare": prepare}),
        source=DirSource(path=str(path)),
    )


def test_a_source_inside_the_data_dir_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "runtimes").mkdir(parents=True)
    (data / "secrets.json").write_text("{}")
    repo = tmp_path / "repo"
    repo.mkdir()
    check_source_roots(_request(repo), (tmp_path,), data)  # beside it: fine
    with pytest.raises(InvalidSource, match="inside the data dir"):
        check_source_roots(_request(data), (tmp_path,), data)
    with pytest.raises(InvalidSource, match="inside the data dir"):
        check_source_roots(_request(repo, data / "secrets.json"), (tmp_path,), data)
    (tmp_path / "link").symlink_to(data / "runtimes")
    with pytest.raises(InvalidSource, match="inside the data dir"):
        check_source_roots(_request(tmp_path / "link"), (tmp_path,), data)

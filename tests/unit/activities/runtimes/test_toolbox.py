"""The toolbox's busybox is installed once per runtimes root, also when many containers start
side by side in one worker (threads of one process) on a fresh root."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from activities.runtimes import toolbox
from activities.runtimes.base import RuntimeUnfit


def test_side_by_side_installs_on_a_fresh_root_all_get_the_toolbox(tmp_path: Path) -> None:
    try:
        toolbox.host_busybox()
    except RuntimeUnfit as exc:
        pytest.skip(f"no static busybox on this host: {exc}")
    for attempt in range(20):  # the race needs a fresh root each time
        root = tmp_path / str(attempt)
        start = threading.Barrier(8)

        def install(root: Path = root, start: threading.Barrier = start) -> Path:
            start.wait()
            return toolbox.installed(root)

        with ThreadPoolExecutor(8) as pool:
            paths = list(pool.map(lambda _: install(), range(8)))
        assert len(set(paths)) == 1 and paths[0].is_file()
        assert sorted(p.name for p in (root / ".toolbox").iterdir()) == [paths[0].name]
        assert paths[0].stat().st_mode & 0o777 == 0o555

"""Copying a container's dirs out (`DockerRuntime._sync_out`), on archives as the engine
streams them: a stream cut short is fetched again; a hard link keeps its target; what cannot
be extracted is named in `polar-skipped.txt`, never fatal. The engine itself is exercised in
tests/system/test_docker_runtime.py; a stream cut mid-archive cannot be made on demand there."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from activities.runtimes.kinds.container_archive import SKIPPED_NOTE
from activities.runtimes.kinds.docker import DockerRuntime
from polar.contracts import RuntimeHandle


def _archive(top: str, files: dict[str, bytes], links: dict[str, str]) -> bytes:
    """A tar as `get_archive` streams it: one top dir (the dir's own name), then its tree."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        root = tarfile.TarInfo(top)
        root.type = tarfile.DIRTYPE
        tar.addfile(root)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.type = tarfile.LNKTYPE
            info.linkname = f"{top}/{target}"
            tar.addfile(info)
    return buf.getvalue()


class _Container:
    """The part of docker's Container that `_sync_out` uses, answering from `archives`
    (a list per path, one per call: the first may be cut short)."""

    def __init__(self, archives: dict[str, list[bytes]]) -> None:
        self.archives = archives
        self.calls: list[str] = []

    def get_archive(self, path: str) -> tuple[Any, dict[str, Any]]:
        self.calls.append(path)
        data = self.archives[path].pop(0)
        return iter([data[i : i + 4096] for i in range(0, len(data), 4096)]), {}


@pytest.fixture
def runtime(tmp_path: Path) -> tuple[DockerRuntime, RuntimeHandle]:
    rt = DockerRuntime.__new__(DockerRuntime)  # no engine: only the copy-out is exercised
    rt.root = tmp_path / "runtimes"
    handle = RuntimeHandle(kind="docker", session_id="s", workdir="/workspace", host="h")
    for path in (rt.home(handle), rt.scratch(handle)):
        path.mkdir(parents=True, exist_ok=True)
    return rt, handle


def test_hard_links_come_over_and_a_cut_stream_is_fetched_again(
    runtime: tuple[DockerRuntime, RuntimeHandle],
) -> None:
    rt, handle = runtime
    home, scratch = rt.home(handle), rt.scratch(handle)
    whole = _archive(home.name, {"cache/a": b"cached\n"}, {"cache/b": "cache/a", "c": "cache/a"})
    container = _Container(
        {
            # the first stream ends at a header: a tree one file short, were it not checked
            str(home): [whole[: 3 * tarfile.BLOCKSIZE], whole],
            str(scratch): [_archive(scratch.name, {"out.txt": b"result\n"}, {})],
        }
    )
    rt._sync_out(container, handle)
    assert container.calls == [str(home), str(home), str(scratch)]
    for name in ("cache/a", "cache/b", "c"):
        assert (home / name).read_text() == "cached\n"
    assert (scratch / "out.txt").read_text() == "result\n"
    assert not (home / SKIPPED_NOTE).exists()


def test_a_hard_link_to_what_is_missing_is_skipped_and_named(
    runtime: tuple[DockerRuntime, RuntimeHandle],
) -> None:
    rt, handle = runtime
    home, scratch = rt.home(handle), rt.scratch(handle)
    container = _Container(
        {
            str(home): [_archive(home.name, {"kept": b"k\n"}, {"dangling": "not-there"})],
            str(scratch): [_archive(scratch.name, {}, {})],
        }
    )
    rt._sync_out(container, handle)
    assert (home / "kept").read_text() == "k\n"
    assert not (home / "dangling").exists()
    assert (home / SKIPPED_NOTE).read_text().startswith("dangling: ")


def test_a_stream_cut_every_time_fails_the_copy(
    runtime: tuple[DockerRuntime, RuntimeHandle],
) -> None:
    rt, handle = runtime
    home = rt.home(handle)
    whole = _archive(home.name, {"a": b"x" * 20000}, {})
    container = _Container({str(home): [whole[:5000]] * 3})
    with pytest.raises(tarfile.TarError):
        rt._sync_out(container, handle)
    assert len(container.calls) == 3

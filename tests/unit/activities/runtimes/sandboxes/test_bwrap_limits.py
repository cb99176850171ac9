"""bwrap's limits without a sandbox: whether the host can delegate a cgroup v2 with pids
(read from its cgroup mount, here a made-up tree), the rlimits a command gets (RLIMIT_NPROC
left out where a delegated cgroup's pids.max caps each session), the child cgroup a
command gets, and what the disk watchdog counts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activities.runtimes.kinds import local
from activities.runtimes.resource_limits import (
    ContainerLimits,
    DirsWatchdog,
    writable_layer_bytes,
)
from activities.runtimes.sandboxes import bwrap
from activities.runtimes.sandboxes.local_sandbox import Sandbox

LIMITS = ContainerLimits(cpus=1.5, memory_bytes=1 << 30, pids=64, disk_bytes=1 << 28)


def test_a_hybrid_hierarchy_is_named(tmp_path: Path) -> None:
    (tmp_path / "pids").mkdir()
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    why = bwrap.cgroup_v2_unavailable(tmp_path)
    assert why and "hybrid" in why and "[hugetlb]" in why, why


def test_v1_only_and_v2_without_pids_are_named(tmp_path: Path) -> None:
    assert "cgroup v1 only" in (bwrap.cgroup_v2_unavailable(tmp_path) or "")
    (tmp_path / "cgroup.controllers").write_text("cpu memory io\n")
    assert "no pids controller" in (bwrap.cgroup_v2_unavailable(tmp_path) or "")
    (tmp_path / "cgroup.controllers").write_text("cpu memory io pids\n")
    assert bwrap.cgroup_v2_unavailable(tmp_path) is None


def test_nproc_is_left_out_only_when_asked() -> None:
    with_nproc = bwrap.rlimit_argv("prlimit", LIMITS)
    assert "--nproc=64" in with_nproc and "--fsize=268435456" in with_nproc
    assert with_nproc[-1] == "--"
    without = bwrap.rlimit_argv("prlimit", LIMITS, nproc=False, data=False)
    assert not [a for a in without if a.startswith(("--nproc", "--data"))], without
    assert "--core=0" in without


def test_a_delegated_dir_with_pids_gives_each_command_its_cap(tmp_path: Path) -> None:
    (tmp_path / "cgroup.procs").write_text("")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    cgroup = bwrap.DelegatedCgroup(tmp_path)
    assert cgroup.problem() is None and not cgroup.caps_pids()
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    assert cgroup.caps_pids()
    with cgroup.child("s1", LIMITS) as child:
        assert (child / "pids.max").read_text() == "64"
        assert (child / "memory.max").read_text() == str(1 << 30)
        assert not (child / "cpu.max").exists()  # cpu not handed down
    assert bwrap.DelegatedCgroup(tmp_path / "nope").problem()


def _bwrap_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cgroup: Path | None
) -> local.LocalRuntime:
    monkeypatch.setattr(local, "detect_sandbox", lambda: Sandbox(bwrap.MODE, ("bwrap",)))
    return local.LocalRuntime(tmp_path / "runtimes", cgroup=cgroup)


def test_a_bwrap_worker_without_a_pids_cgroup_says_its_cap_is_per_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert _bwrap_runtime(tmp_path, monkeypatch, None).sandbox.mode == bwrap.MODE
    assert "counted over every task of this user" in caplog.text
    caplog.clear()
    delegated = tmp_path / "delegated"
    delegated.mkdir()
    (delegated / "cgroup.procs").write_text("")
    (delegated / "cgroup.subtree_control").write_text("memory pids\n")
    runtime = _bwrap_runtime(tmp_path, monkeypatch, delegated)
    assert runtime.sandbox.mode == bwrap.MODE and runtime.cgroup is not None
    assert "counted over every task" not in caplog.text


def test_the_disk_watchdog_counts_hard_links_once_and_sparse_files_as_used(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "blob").write_bytes(os.urandom(1 << 20))
    for i in range(8):  # a cache linked into the venv, say: no extra disk
        os.link(a / "blob", b / f"link{i}")
    with open(a / "sparse", "wb") as out:
        out.truncate(1 << 30)
    used = writable_layer_bytes(a) + writable_layer_bytes(b)
    assert used < 4 << 20, used  # (per call: each dir counts its links once)
    watchdog = DirsWatchdog((a, b), limit=3 << 20)
    assert watchdog.exceeded(now=True) is None
    (b / "more").write_bytes(os.urandom(3 << 20))
    assert "disk limit exceeded" in (watchdog.exceeded(now=True) or "")

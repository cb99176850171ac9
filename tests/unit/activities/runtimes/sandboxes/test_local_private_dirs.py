"""The root sandbox's own /tmp, /var/tmp and /dev/shm (issue 32), with real processes: what a
command writes there lands in its session dir (the host's dirs untouched), is seen by the
session's next command, counts against its disk limit and goes with its teardown; the
session dir stays reachable at its path though it lies under /tmp here (pytest's). And the
started marker's pipe reaches the worker through the real sandbox's argv (nsenter, unshare,
setpriv, prlimit), out of reach of a harness that truncates its stderr."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from activities.runtimes import started_marker
from activities.runtimes.kinds.local import LocalRuntime
from activities.runtimes.kinds.local_layout import PRIVATE_DIR
from activities.runtimes.sandboxes.local_sandbox import PRIVATE_DIRS, private_dirs
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.tasks.spec import DirSource, RuntimeSpec

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the sealed sandbox needs a root worker (CI runs as root)"
)

Session = Callable[..., AbstractAsyncContextManager[tuple[LocalRuntime, RuntimeHandle]]]
HOST_DIRS = [Path(host) for _, host in PRIVATE_DIRS if Path(host).is_dir()]


@pytest.fixture
def session(tmp_path: Path) -> Session:
    source = tmp_path / "repo"
    source.mkdir()
    (source / "a.txt").write_text("a\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=source, check=True)
    runtime = LocalRuntime(tmp_path / "runtimes")

    @asynccontextmanager
    async def make(**limits: Any) -> AsyncIterator[tuple[LocalRuntime, RuntimeHandle]]:
        request = PrepareRequest(
            session_id=f"prv-{uuid.uuid4().hex[:8]}",
            task_id="private",
            runtime=RuntimeSpec.model_validate({"kind": "local", **limits}),
            source=DirSource(path=str(source)),
        )
        handle = await runtime.prepare(request)
        try:
            yield runtime, handle
        finally:
            await runtime.teardown(handle)

    return make


async def _run(
    runtime: LocalRuntime, handle: RuntimeHandle, command: str, **kwargs: Any
) -> tuple[Any, str, str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    outcome = await runtime.run(
        handle, command, env={}, log_name=name, timeout_s=kwargs.pop("timeout_s", 120), **kwargs
    )
    out, err = (p.read_text(errors="replace") for p in runtime.log_paths(handle, name))
    return outcome, out, err


async def test_tmp_var_tmp_and_dev_shm_are_the_sessions_own(session: Session) -> None:
    tag = f"polar-private-{uuid.uuid4().hex[:8]}"
    write = " && ".join(f"echo {d.name} > {d}/{tag}" for d in HOST_DIRS)
    async with session() as (runtime, handle):
        base = Path(handle.workdir).parent
        outcome, out, err = await _run(runtime, handle, f"{write} && pwd && ls -a /tmp")
        assert outcome.exit_code == 0, err
        assert out.splitlines()[0] == handle.workdir  # the session dir, still at its path
        assert [p for d in HOST_DIRS if (p := d / tag).exists()] == []  # not the host's
        for name, host in PRIVATE_DIRS:
            if Path(host).is_dir():
                mine = base / PRIVATE_DIR / name / tag
                assert mine.read_text() == f"{Path(host).name}\n", name
        # a POSIX semaphore (sem_open in /dev/shm) and the session's next command sees them
        semaphore = "python3 -c 'import multiprocessing as m; m.Lock().acquire()'"
        read = " && ".join(f"cat {d}/{tag}" for d in HOST_DIRS)
        outcome, out, err = await _run(runtime, handle, f"{semaphore} && {read}")
        assert outcome.exit_code == 0, err
        assert out.split() == [d.name for d in HOST_DIRS]
    assert not base.exists()  # gone with the session


async def test_what_it_writes_in_tmp_counts_against_its_disk_limit(session: Session) -> None:
    """300 MiB in /tmp and /dev/shm against a 100 MiB limit: killed, nothing on the host."""
    tag = f"polar-fill-{uuid.uuid4().hex[:8]}"
    fill = (
        f"mkdir /tmp/{tag} /dev/shm/{tag} && for i in $(seq 19); do "
        f"head -c 8M /dev/zero > /tmp/{tag}/f$i && head -c 8M /dev/zero > /dev/shm/{tag}/f$i; "
        "sleep 0.2; done; echo survived"
    )
    async with session(disk="100m") as (runtime, handle):
        outcome, out, err = await _run(runtime, handle, fill)
        assert outcome.limit_exceeded and "disk limit exceeded" in outcome.limit_exceeded, (
            outcome,
            err[-500:],
        )
        assert "survived" not in out
        assert not (Path("/tmp") / tag).exists() and not (Path("/dev/shm") / tag).exists()
    assert not (Path("/tmp") / tag).exists() and not (Path("/dev/shm") / tag).exists()


async def test_the_marker_pipe_passes_the_sandbox_and_outlives_an_erased_stderr(
    session: Session,
) -> None:
    async with session() as (runtime, handle):
        for code in (0, 1):
            pipe = started_marker.Pipe(started_marker.new_nonce())
            try:
                # its stderr log is root's: no reopening, but the descriptor is writable
                erase = f"echo noise >&2; python3 -c 'import os; os.ftruncate(2, 0)'; exit {code}"
                outcome, _, err = await _run(runtime, handle, pipe.wrap(erase), pass_fds=pipe.fds)
            finally:
                seen = pipe.close()
            assert outcome.exit_code == code and seen, (outcome, err)
            assert err == ""  # erased: the stderr marker would have gone with it


def test_a_skeleton_dir_the_harness_made_is_refused() -> None:
    """A mount point of the skeleton that is not root's (made first by someone else in the
    sticky dir) is never bound onto: the command is refused."""
    stem = f"polar-skel-{uuid.uuid4().hex[:8]}"
    session_dir, other = Path("/tmp") / stem, Path("/tmp") / f"{stem}-other"
    (other / "sub").mkdir(parents=True)
    session_dir.mkdir()
    try:
        top = session_dir / PRIVATE_DIR
        binds = private_dirs(top, [session_dir]).binds
        assert (str(session_dir), str(top / "tmp" / stem)) in binds
        assert binds[-1] == (str(top / "shm"), "/dev/shm")
        assert (top / "tmp" / stem).stat().st_mode & 0o777 == 0o711
        assert (top / "tmp").stat().st_mode & 0o7777 == 0o1777
        planted = top / "tmp" / other.name  # as the harness could, in its sticky /tmp
        planted.mkdir()
        os.chown(planted, 65534, 65534)
        with pytest.raises(OSError, match="not a dir of the worker's"):
            private_dirs(top, [session_dir, other / "sub"])
    finally:
        subprocess.run(["rm", "-rf", str(session_dir), str(other)], check=True)


@pytest.mark.skipif(shutil.which("ipcmk") is None, reason="no ipcmk (util-linux)")
async def test_system_v_shared_memory_goes_with_the_command(session: Session) -> None:
    """A System V segment (shmget) is not a file: it lived on in the host's IPC namespace
    after its maker, under a pool uid the next sessions reuse."""
    async with session() as (runtime, handle):
        outcome, out, err = await _run(runtime, handle, "ipcmk -M 1048576 && ipcs -m")
        assert outcome.exit_code == 0, err
        assert "1048576" in out  # it was made, in the command's namespace
        uid = str(Path(handle.workdir).stat().st_uid)
        rows = [row.split() for row in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
        assert [row for row in rows if uid in (row[7], row[9])] == [], rows  # uid, cuid

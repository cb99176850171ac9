"""What is particular to the `docker` runtime, against a real engine and the local image.

The cases every runtime honours (a dir source and its command's output, exit code and
scratch; limits, no network, the channel mount and teardown; reap, timeout and
cancellation; prepare actions; a missing image and the wall-clock budget; a moved
workspace; a session end to end) are in test_runtime_contract.py. Here: a git source at
a ref, the disk watchdog, a fork bomb, odd files in the harness's home and the service
image. `docker_engine` starts `dockerd` when none answers; `docker_image` builds
polar/runtime:py311 (cached by recipe label, about a minute the first time).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from activities.runtimes.kinds.docker import DockerRuntime
from polar.contracts import PrepareRequest
from polar.tasks.spec import GitSource, RuntimeSpec
from tests.support.container_sessions import (
    docker_runtime,
    skip_without_disk_watchdog,
    small_repo,
)
from tests.support.git import git as run_git

pytestmark = pytest.mark.slow


@pytest.fixture
def runtime(docker_image: str, tmp_path: Path) -> Iterator[DockerRuntime]:
    yield from docker_runtime(tmp_path / "runtimes")


def _request(session_id: str, source: object = None, **runtime: object) -> PrepareRequest:
    return PrepareRequest(
        session_id=session_id,
        task_id="t",
        runtime=RuntimeSpec.model_validate({"kind": "docker", **runtime}),
        source=source,
    )


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def test_git_source_at_a_ref(runtime: DockerRuntime, tmp_path: Path) -> None:
    repo = small_repo(tmp_path)

    def git(*args: str) -> str:
        return run_git(repo, *args)

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "base")
    base = git("rev-parse", "HEAD")
    (repo / "hello.txt").write_text("changed later\n")
    git("commit", "-qam", "later")
    handle = await runtime.prepare(_request("git-1", GitSource(url=str(repo), ref=base)))
    try:
        outcome = await runtime.run(
            handle,
            "cat hello.txt && git rev-parse HEAD && git status --porcelain | wc -l",
            env={},
            log_name="git",
            timeout_s=60,
        )
        assert outcome.exit_code == 0, _read(runtime.log_paths(handle, "git")[1])
        assert _read(runtime.log_paths(handle, "git")[0]).split() == ["hello", base, "0"]
    finally:
        await runtime.teardown(handle)


async def test_disk_limit_stops_a_disk_filling_command(runtime: DockerRuntime) -> None:
    """Writing past the disk limit (many files, each under the file-size rlimit) is stopped by
    the watchdog; a single file past it is refused by the rlimit."""
    skip_without_disk_watchdog("docker")
    handle = await runtime.prepare(_request("disk-1", disk="64m"))
    try:
        fill = "for i in $(seq 1000); do head -c 8M /dev/zero > f$i || exit 9; sleep 0.05; done"
        outcome = await runtime.run(
            handle, fill, env={}, log_name="fill", timeout_s=120, tick_s=0.5
        )
        assert not outcome.timed_out
        assert outcome.limit_exceeded and "disk limit" in outcome.limit_exceeded
        assert "disk limit exceeded" in _read(runtime.log_paths(handle, "fill")[1])
        big = await runtime.run(
            handle, "rm -f f*; head -c 100M /dev/zero > one", env={}, log_name="big", timeout_s=60
        )
        assert big.exit_code != 0  # SIGXFSZ / EFBIG at 64 MiB
        size = await runtime.run(handle, "stat -c %s one", env={}, log_name="sz", timeout_s=30)
        assert size.exit_code == 0
        assert int(_read(runtime.log_paths(handle, "sz")[0])) <= 64 * 1024 * 1024
    finally:
        await runtime.teardown(handle)


async def test_fork_bomb_is_contained_and_killed(runtime: DockerRuntime) -> None:
    """A fork bomb hits the pids limit, runs into its timeout while ticks keep coming, and is
    killed whole; the container answers afterwards."""
    handle = await runtime.prepare(_request("bomb-1", pids=256))
    try:
        ticks: list[float] = []
        outcome = await runtime.run(
            handle,
            "echo before-bomb; bomb() { bomb | bomb & }; bomb; sleep 600",
            env={},
            log_name="bomb",
            timeout_s=8,
            on_tick=ticks.append,
            tick_s=0.5,
        )
        assert outcome.timed_out
        assert len(ticks) >= 5
        assert "before-bomb" in _read(runtime.log_paths(handle, "bomb")[0])
        ps = await runtime.run(handle, "ps -e | wc -l", env={}, log_name="ps", timeout_s=30)
        assert ps.exit_code == 0
        assert int(_read(runtime.log_paths(handle, "ps")[0])) < 10
    finally:
        await runtime.teardown(handle)


def test_service_image_builds_and_runs_polar(docker_image: str) -> None:
    """infra/deploy's image: the project installed from source, its CLI runs in a container."""
    import sys

    from tests.conftest import REPO

    build = subprocess.run(
        [sys.executable, str(REPO / "infra" / "images" / "build.py"), "--service"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert build.returncode == 0, build.stdout + build.stderr

    output = docker.from_env().containers.run(
        "polar/polar:latest", ["worker", "--help"], network_mode="host", remove=True
    )
    assert b"--queues" in output


async def test_odd_files_in_home_are_skipped_with_a_note_never_fatal(
    runtime: DockerRuntime,
) -> None:
    """Hard links (uv's and pnpm's caches make them), a FIFO and a link out of the dir in the
    harness's home: the run ends normally, the hard links come over, the rest is left out
    and named in the home's `polar-skipped.txt` where it could not be brought."""
    handle = await runtime.prepare(_request("odd-home"))
    try:
        command = (
            'mkdir -p "$HOME/cache/deep" && echo cached > "$HOME/cache/a" && '
            'ln "$HOME/cache/a" "$HOME/cache/deep/b" && ln "$HOME/cache/a" "$HOME/c" && '
            'mkfifo "$HOME/pipe" && ln -s /etc/passwd "$HOME/out-link" && echo done'
        )
        outcome = await runtime.run(handle, command, env={}, log_name="odd", timeout_s=60)
        assert outcome.exit_code == 0, _read(runtime.log_paths(handle, "odd")[1])
        home = runtime.home(handle)
        for name in ("cache/a", "cache/deep/b", "c"):
            assert (home / name).read_text() == "cached\n", name
        assert not (home / "pipe").exists() and not (home / "out-link").exists()
        # the next command sees the same home (the skipped note included), and runs
        again = await runtime.run(
            handle, 'cat "$HOME/cache/deep/b"', env={}, log_name="again", timeout_s=60
        )
        assert again.exit_code == 0
        assert _read(runtime.log_paths(handle, "again")[0]) == "cached\n"
    finally:
        await runtime.teardown(handle)

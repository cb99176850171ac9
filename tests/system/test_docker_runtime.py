"""The `docker` runtime against a real engine and the locally built image.

`docker_engine` starts `dockerd` when none answers; `docker_image` builds
polar/runtime:py311 (cached by recipe label, about a minute the first time).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import NotFound

from activities.runtimes import InvalidRuntime, PrepareFailed
from activities.runtimes.channel import SANDBOX_DIR
from activities.runtimes.docker import LABEL, DockerRuntime
from polar.app.devstack import free_port
from polar.client.sdk import PolarClient
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.tasks.spec import DirSource, GitSource, RuntimeSpec
from tests.support.container_sessions import (
    fixed_and_wrong_sessions,
    graded_in_a_moved_workspace,
    skip_without_disk_watchdog,
    small_repo,
)
from tests.support.git import git as run_git

pytestmark = pytest.mark.slow


@pytest.fixture
def runtime(docker_image: str, tmp_path: Path) -> Iterator[DockerRuntime]:
    rt = DockerRuntime(tmp_path / "runtimes")
    yield rt
    client = docker.from_env()
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        if container.name.startswith(rt.container_name("")):
            container.remove(force=True)


def _request(session_id: str, source: object = None, **runtime: object) -> PrepareRequest:
    return PrepareRequest(
        session_id=session_id,
        task_id="t",
        runtime=RuntimeSpec.model_validate({"kind": "docker", **runtime}),
        source=source,
    )


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def test_dir_source_command_output_exit_code_and_scratch(
    runtime: DockerRuntime, tmp_path: Path
) -> None:
    started = time.monotonic()
    handle = await runtime.prepare(
        _request("dir-1", DirSource(path=str(small_repo(tmp_path))), cpus=1, memory="512m")
    )
    prepare_s = time.monotonic() - started
    try:
        assert handle.workdir == "/workspace"
        (runtime.scratch(handle) / "input.txt").write_text("from the worker\n")
        command = (
            "test -f /.dockerenv && pwd && cat hello.txt pkg/mod.py && "
            'cat "$SCRATCH/input.txt" && echo "$HOME" && echo to-stderr >&2 && '
            'echo result > "$SCRATCH/out.txt" && echo cfg > "$HOME/native.log" && exit 3'
        )
        outcome = await runtime.run(
            handle,
            command,
            env={"SCRATCH": str(runtime.scratch(handle))},
            log_name="cmd",
            timeout_s=60,
        )
        assert outcome.exit_code == 3 and not outcome.timed_out
        out, err = (_read(p) for p in runtime.log_paths(handle, "cmd"))
        assert out.splitlines() == [
            "/workspace",
            "hello",
            "X = 1",
            "from the worker",
            str(runtime.home(handle)),
        ]
        assert err == "to-stderr\n"
        # what the command wrote in scratch and home is on the worker after `run`
        assert (runtime.scratch(handle) / "out.txt").read_text() == "result\n"
        assert (runtime.home(handle) / "native.log").read_text() == "cfg\n"
        # a file removed on the worker is gone for the next command too
        (runtime.scratch(handle) / "out.txt").unlink()
        again = await runtime.run(
            handle,
            f"test ! -e {runtime.scratch(handle)}/out.txt",
            env={},
            log_name="again",
            timeout_s=60,
        )
        assert again.exit_code == 0
        # the source on the host was copied, not mounted
        assert (tmp_path / "repo" / "hello.txt").read_text() == "hello\n"
    finally:
        await runtime.teardown(handle)
    assert prepare_s < 30
    print(f"docker prepare (container start + copy-in): {prepare_s:.2f}s")


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


async def test_limits_no_network_one_channel_mount_and_teardown(
    runtime: DockerRuntime, tmp_path: Path
) -> None:
    handle = await runtime.prepare(
        _request("limits-1", DirSource(path=str(small_repo(tmp_path))), cpus=1.5, memory="256m")
    )
    client = docker.from_env()
    name = runtime.container_name("limits-1")
    try:
        attrs = client.containers.get(name).attrs
        host = attrs["HostConfig"]
        assert host["NanoCpus"] == 1_500_000_000
        assert host["Memory"] == host["MemorySwap"] == 256 * 1024 * 1024
        assert host["PidsLimit"] == 1024  # the default
        assert {u["Name"]: u["Hard"] for u in host["Ulimits"]}["fsize"] == 10 * 1024**3
        assert host["NetworkMode"] == "none"
        assert host["Init"] is True
        # the only mount: the session's channel dir, read-only
        assert [(m["Destination"], m["RW"]) for m in attrs["Mounts"]] == [(SANDBOX_DIR, False)]
        assert attrs["Mounts"][0]["Source"] == str(runtime.channel_dir(handle))
        assert attrs["Config"]["Labels"][LABEL] == "limits-1"
        # no network: a server on the worker's loopback (like Temporal or S3) is unreachable
        port = free_port()
        server = http.server.HTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            fetch = (
                "import urllib.request; "
                f"urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=5)"
            )
            outcome = await runtime.run(
                handle, f'python -c "{fetch}"', env={}, log_name="net", timeout_s=60
            )
            ip = await runtime.run(
                handle, "cat /proc/net/dev", env={}, log_name="ifaces", timeout_s=60
            )
        finally:
            server.shutdown()
        assert outcome.exit_code != 0
        assert "Connection refused" in _read(runtime.log_paths(handle, "net")[1])
        assert ip.exit_code == 0
        interfaces = [
            line.split(":")[0].strip()
            for line in _read(runtime.log_paths(handle, "ifaces")[0]).splitlines()[2:]
        ]
        assert interfaces == ["lo"]
    finally:
        await runtime.teardown(handle)
    with pytest.raises(NotFound):
        client.containers.get(name)
    assert not (runtime.root / "limits-1").exists()
    # teardown is idempotent and works from a bare handle (prepare never ran)
    await runtime.teardown(RuntimeHandle(kind="docker", session_id="never", workdir="", host=""))


async def test_reap_kills_what_a_command_left_behind(runtime: DockerRuntime) -> None:
    """A detached writer outlives its command; after `reap` nothing of it runs, the files
    stay, the container works, and its wall-clock deadline is unchanged."""
    handle = await runtime.prepare(_request("reap-1"))
    try:
        deadline = docker.from_env().containers.get(runtime.container_name("reap-1")).attrs
        writer = (
            "setsid nohup bash -c 'while :; do date +%s%N >> /workspace/beat; sleep 0.1; done' "
        )
        outcome = await runtime.run(
            handle, f"{writer} >/dev/null 2>&1 & echo started", env={}, log_name="w", timeout_s=30
        )
        assert outcome.exit_code == 0
        await asyncio.sleep(1)
        await runtime.reap(handle)
        ps = await runtime.run(
            handle, "ps -eo args; wc -l < beat", env={}, log_name="ps", timeout_s=30
        )
        assert ps.exit_code == 0
        listing = _read(runtime.log_paths(handle, "ps")[0])
        assert "while :" not in listing
        lines = int(listing.split()[-1])
        assert lines > 0  # the file system survived the reap
        await asyncio.sleep(1)
        again = await runtime.run(handle, "wc -l < beat", env={}, log_name="ps2", timeout_s=30)
        assert again.exit_code == 0
        assert int(_read(runtime.log_paths(handle, "ps2")[0]).split()[-1]) == lines
        after = docker.from_env().containers.get(runtime.container_name("reap-1")).attrs
        assert after["Config"]["Env"] == deadline["Config"]["Env"]  # same POLAR_DEADLINE
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


async def test_timeout_kills_the_whole_command(runtime: DockerRuntime, tmp_path: Path) -> None:
    handle = await runtime.prepare(_request("timeout-1"))
    try:
        ticks: list[float] = []
        outcome = await runtime.run(
            handle,
            "sleep 300 & sleep 301",
            env={},
            log_name="slow",
            timeout_s=3,
            on_tick=ticks.append,
            tick_s=0.5,
        )
        assert outcome.timed_out and outcome.exit_code is None
        assert outcome.duration_s < 15
        assert ticks  # heartbeats while it ran
        ps = await runtime.run(handle, "ps -eo args", env={}, log_name="ps", timeout_s=30)
        assert ps.exit_code == 0
        assert "sleep 30" not in _read(runtime.log_paths(handle, "ps")[0])
    finally:
        await runtime.teardown(handle)


async def test_cancellation_kills_the_command(runtime: DockerRuntime) -> None:
    handle = await runtime.prepare(_request("cancel-1"))
    try:
        task = asyncio.create_task(
            runtime.run(handle, "sleep 302", env={}, log_name="c", timeout_s=120)
        )
        await asyncio.sleep(2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await runtime.run(handle, "ps -eo args", env={}, log_name="ps", timeout_s=30)
        assert "sleep 302" not in _read(runtime.log_paths(handle, "ps")[0])
    finally:
        await runtime.teardown(handle)


async def test_prepare_actions_upload_and_retry(runtime: DockerRuntime, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    (extra / "sub").mkdir(parents=True)
    (extra / "sub" / "data.txt").write_text("payload\n")
    (tmp_path / "one.cfg").write_text("k=v\n")
    flaky = "test -e /tmp/tried || { touch /tmp/tried; exit 1; }; echo ok > prepared.txt"
    handle = await runtime.prepare(
        _request(
            "actions-1",
            DirSource(path=str(small_repo(tmp_path))),
            prepare=[
                {"type": "upload", "src": str(extra), "dest": "vendor/extra"},
                {"type": "upload", "src": str(tmp_path / "one.cfg"), "dest": "/etc/polar/one.cfg"},
                {"type": "run", "command": flaky, "retries": 1},
            ],
        )
    )
    try:
        outcome = await runtime.run(
            handle,
            "cat vendor/extra/sub/data.txt /etc/polar/one.cfg prepared.txt",
            env={},
            log_name="check",
            timeout_s=60,
        )
        assert outcome.exit_code == 0, _read(runtime.log_paths(handle, "check")[1])
        assert _read(runtime.log_paths(handle, "check")[0]) == "payload\nk=v\nok\n"
    finally:
        await runtime.teardown(handle)
    # a command that keeps failing fails prepare, and leaves no container behind
    with pytest.raises(PrepareFailed, match="exited 7 after 2 attempt"):
        await runtime.prepare(
            _request("actions-2", prepare=[{"type": "run", "command": "exit 7", "retries": 1}])
        )
    with pytest.raises(NotFound):
        docker.from_env().containers.get(runtime.container_name("actions-2"))


async def test_missing_image_and_wall_clock_budget(runtime: DockerRuntime) -> None:
    with pytest.raises(InvalidRuntime, match="not found"):
        await runtime.prepare(_request("img-1", image="polar/no-such-image:1"))
    handle = await runtime.prepare(_request("wall-1", wall_clock_s=2))
    try:
        await asyncio.sleep(4)  # the container's whole lifetime is spent
        outcome = await runtime.run(handle, "true", env={}, log_name="late", timeout_s=30)
        assert outcome.timed_out
        assert "wall-clock" in _read(runtime.log_paths(handle, "late")[1])
    finally:
        await runtime.teardown(handle)


async def test_session_end_to_end_in_docker(
    polar: PolarClient, docker_image: str, tmp_path: Path
) -> None:
    """A Temporal task whose sessions run in containers: the harness edits, the evaluator grades."""
    repo = small_repo(tmp_path)
    fixed, wrong = await fixed_and_wrong_sessions(
        polar,
        repo,
        {"kind": "docker", "image": docker_image, "cpus": 1, "memory": "1g"},
        in_container="test -f /.dockerenv",
        label="docker",
    )
    client = docker.from_env()
    for session in (fixed, wrong):  # teardown removed each container and host dir
        labelled = client.containers.list(
            all=True, filters={"label": f"{LABEL}={session.session_id}"}
        )
        assert labelled == []
        assert not (Path(polar.settings.data_dir) / "runtimes" / session.session_id).exists()


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
    import docker

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


async def test_a_moved_workspace_is_where_the_session_works_and_is_graded(
    runtime: DockerRuntime, tmp_path: Path
) -> None:
    await graded_in_a_moved_workspace(runtime, "docker", tmp_path)

"""The runtime contract: what every runtime promises a session, run against each of them.

One suite for `local` (the sealed sandbox), `docker` and `podman` (rootless, and root when
the tests run as root): a source copied in, a command's output, exit code, scratch and
home; a git source at a ref; no network but the channel; `reap` ends what a command left
running; a timeout or a cancellation ends the whole command; prepare actions (upload, a
retried command) and a prepare that fails leaving nothing behind; teardown is idempotent.
Whether a process is gone is read from what it does (a file it keeps appending to stops
growing), not from `ps`, which a PID namespace per command would make blind. What is
particular to one runtime (engine limits, disk watchdog, images) stays in its own file
beside this one. A new runtime joins by adding a case to `KINDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from activities.runtimes import PrepareFailed
from activities.runtimes.base import Runtime
from polar.app.devstack import free_port
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.tasks.spec import DirSource, GitSource, RuntimeSpec
from tests.support.container_sessions import small_repo
from tests.support.git import git as run_git

pytestmark = pytest.mark.slow

KINDS = ["local", "docker", "podman-rootless"] + (["podman-root"] if os.geteuid() == 0 else [])

BEAT = "setsid nohup bash -c 'while :; do echo x >> beat; sleep 0.1; done' >/dev/null 2>&1 &"
"""A detached writer in the workspace: alive exactly while `beat` grows."""


@dataclass
class UnderTest:
    """A runtime of the contract and what the suite needs to know of it."""

    runtime: Runtime
    kind: str
    spec: dict[str, object]
    left_nothing: Callable[[str], bool]
    """Whether nothing of a session (container, session dir) is left on the host."""

    def request(self, session_id: str, source: object = None, **fields: object) -> PrepareRequest:
        spec = RuntimeSpec.model_validate({**self.spec, **fields})
        return PrepareRequest(session_id=session_id, task_id="t", runtime=spec, source=source)

    async def shell(self, handle: RuntimeHandle, command: str, name: str) -> tuple[int | None, str]:
        """Run `command`; its exit code and stdout."""
        outcome = await self.runtime.run(handle, command, env={}, log_name=name, timeout_s=60)
        return outcome.exit_code, _read(self.runtime.log_paths(handle, name)[0])

    async def beats(self, handle: RuntimeHandle, name: str) -> int:
        code, out = await self.shell(handle, "wc -l < beat", name)
        assert code == 0, out
        return int(out.split()[-1])

    async def assert_beat_stopped(self, handle: RuntimeHandle, name: str) -> None:
        """The writer is gone: `beat` no longer grows (its file system is intact)."""
        first = await self.beats(handle, f"{name}-1")
        await asyncio.sleep(1)
        assert await self.beats(handle, f"{name}-2") == first, "a process outlived its command"


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _local(tmp_path: Path) -> UnderTest:
    from activities.runtimes.local import LocalRuntime

    runtime = LocalRuntime(tmp_path / "runtimes")
    return UnderTest(
        runtime, "local", {"kind": "local"}, lambda sid: not (runtime.root / sid).exists()
    )


def _docker(tmp_path: Path, image: str) -> UnderTest:
    import docker
    from docker.errors import NotFound

    from activities.runtimes.docker import DockerRuntime

    runtime = DockerRuntime(tmp_path / "runtimes")
    client = docker.from_env()

    def left_nothing(sid: str) -> bool:
        try:
            client.containers.get(runtime.container_name(sid))
        except NotFound:
            return not (runtime.root / sid).exists()
        return False

    return UnderTest(runtime, "docker", {"kind": "docker", "image": image}, left_nothing)


def _podman(mode: str) -> UnderTest:
    from activities.runtimes.podman import PodmanRuntime, resolve_mode, rootless_support

    if mode == "rootless" and resolve_mode()[0] != "rootless":
        supported, why = rootless_support()
        if not supported:
            pytest.skip(f"rootless podman is not supported here: {why}")
    # the channel dir is bind-mounted: rootless podman (polar-runner) must reach it, which
    # pytest's 0700 tmp dirs forbid
    root = Path(tempfile.mkdtemp(prefix="polar-podman-"))
    root.chmod(0o711)
    runtime = PodmanRuntime(root / "runtimes", mode=mode)

    def left_nothing(sid: str) -> bool:
        name = runtime.container_name(sid)
        exists = runtime.podman.run("container", "exists", name, check=False).returncode == 0
        return not exists and not (runtime.root / sid).exists()

    return UnderTest(runtime, "podman", {"kind": "podman"}, left_nothing)


@pytest.fixture(params=KINDS)
def rt(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[UnderTest]:
    kind = request.param
    if kind == "local":
        yield _local(tmp_path)
        return
    if kind == "docker":
        yield _docker(tmp_path, request.getfixturevalue("docker_image"))
        return
    request.getfixturevalue("podman_image")
    under = _podman(kind.removeprefix("podman-"))
    yield under
    shutil.rmtree(under.runtime.root.parent, ignore_errors=True)


async def test_source_output_exit_code_scratch_and_home(rt: UnderTest, tmp_path: Path) -> None:
    runtime = rt.runtime
    handle = await runtime.prepare(rt.request("dir-1", DirSource(path=str(small_repo(tmp_path)))))
    try:
        (runtime.scratch(handle) / "input.txt").write_text("from the worker\n")
        command = (
            'pwd && cat hello.txt pkg/mod.py && cat "$SCRATCH/input.txt" && echo "$HOME" && '
            'echo "$SECRET" && echo to-stderr >&2 && echo result > "$SCRATCH/out.txt" && '
            'echo cfg > "$HOME/native.log" && exit 3'
        )
        env = {"SCRATCH": str(runtime.scratch(handle)), "SECRET": "s3cret value"}
        outcome = await runtime.run(handle, command, env=env, log_name="cmd", timeout_s=60)
        assert outcome.exit_code == 3 and not outcome.timed_out
        out, err = (_read(p) for p in runtime.log_paths(handle, "cmd"))
        assert out.splitlines() == [
            handle.workdir,
            "hello",
            "X = 1",
            "from the worker",
            str(runtime.home(handle)),
            "s3cret value",
        ]
        assert err == "to-stderr\n"
        # what the command wrote in scratch and home is on the worker after `run`
        assert (runtime.scratch(handle) / "out.txt").read_text() == "result\n"
        assert (runtime.home(handle) / "native.log").read_text() == "cfg\n"
        # a file removed on the worker is gone for the next command too
        (runtime.scratch(handle) / "out.txt").unlink()
        code, _ = await rt.shell(handle, f"test ! -e {runtime.scratch(handle)}/out.txt", "again")
        assert code == 0
        # the source on the host was copied, not mounted: the session's edit stays its own
        code, _ = await rt.shell(handle, "echo edited > hello.txt", "edit")
        assert code == 0
        assert (tmp_path / "repo" / "hello.txt").read_text() == "hello\n"
    finally:
        await runtime.teardown(handle)


async def test_git_source_at_a_ref(rt: UnderTest, tmp_path: Path) -> None:
    repo = small_repo(tmp_path)
    run_git(repo, "init", "-q")
    run_git(repo, "add", ".")
    run_git(repo, "commit", "-qm", "base")
    base = run_git(repo, "rev-parse", "HEAD")
    (repo / "hello.txt").write_text("changed later\n")
    run_git(repo, "commit", "-qam", "later")
    handle = await rt.runtime.prepare(rt.request("git-1", GitSource(url=str(repo), ref=base)))
    try:
        code, out = await rt.shell(
            handle, "cat hello.txt && git rev-parse HEAD && git status --porcelain | wc -l", "git"
        )
        assert code == 0, _read(rt.runtime.log_paths(handle, "git")[1])
        assert out.split() == ["hello", base, "0"]
    finally:
        await rt.runtime.teardown(handle)


async def test_no_network_but_the_channel(rt: UnderTest) -> None:
    """A server on the worker's loopback (as Temporal or S3 are) cannot be reached, and the
    only interface is the sandbox's own loopback."""
    handle = await rt.runtime.prepare(rt.request("net-1"))
    port = free_port()
    server = http.server.HTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        fetch = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/')"
        code, _ = await rt.shell(handle, f'python3 -c "{fetch}"', "net")
        assert code != 0
        assert "Connection refused" in _read(rt.runtime.log_paths(handle, "net")[1])
        code, out = await rt.shell(handle, "cat /proc/net/dev", "ifaces")
        assert code == 0
        assert [line.split(":")[0].strip() for line in out.splitlines()[2:]] == ["lo"]
    finally:
        server.shutdown()
        await rt.runtime.teardown(handle)


async def test_reap_ends_what_a_command_left_running(rt: UnderTest) -> None:
    handle = await rt.runtime.prepare(rt.request("reap-1"))
    try:
        code, _ = await rt.shell(handle, f"{BEAT} echo started", "writer")
        assert code == 0
        await asyncio.sleep(1)
        first = await rt.beats(handle, "alive-1")
        await asyncio.sleep(1)
        assert await rt.beats(handle, "alive-2") > first  # it outlived its command
        await rt.runtime.reap(handle)
        await rt.assert_beat_stopped(handle, "reaped")
    finally:
        await rt.runtime.teardown(handle)


async def test_timeout_ends_the_whole_command(rt: UnderTest) -> None:
    handle = await rt.runtime.prepare(rt.request("timeout-1"))
    try:
        ticks: list[float] = []
        outcome = await rt.runtime.run(
            handle,
            f"{BEAT} sleep 301",
            env={},
            log_name="slow",
            timeout_s=3,
            on_tick=ticks.append,
            tick_s=0.5,
        )
        assert outcome.timed_out and outcome.exit_code is None
        assert ticks  # heartbeats while it ran
        await rt.runtime.reap(handle)  # what the stage does after every harness command
        await rt.assert_beat_stopped(handle, "after")
    finally:
        await rt.runtime.teardown(handle)


async def test_cancellation_ends_the_command(rt: UnderTest) -> None:
    handle = await rt.runtime.prepare(rt.request("cancel-1"))
    try:
        task = asyncio.create_task(
            rt.runtime.run(
                handle,
                "while :; do echo x >> beat; sleep 0.1; done",
                env={},
                log_name="c",
                timeout_s=120,
            )
        )
        await asyncio.sleep(2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await rt.assert_beat_stopped(handle, "cancelled")
    finally:
        await rt.runtime.teardown(handle)


async def test_prepare_actions_and_a_failed_prepare(rt: UnderTest, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    (extra / "sub").mkdir(parents=True)
    (extra / "sub" / "data.txt").write_text("payload\n")
    extra.chmod(0o755)
    (extra / "sub").chmod(0o755)
    flaky = "test -e .tried || { touch .tried; exit 1; }; echo ok > prepared.txt"
    handle = await rt.runtime.prepare(
        rt.request(
            "actions-1",
            prepare=[
                {"type": "upload", "src": str(extra), "dest": "vendor/extra"},
                {"type": "run", "command": flaky, "retries": 1},
            ],
        )
    )
    try:
        code, out = await rt.shell(handle, "cat vendor/extra/sub/data.txt prepared.txt", "check")
        assert code == 0, _read(rt.runtime.log_paths(handle, "check")[1])
        assert out == "payload\nok\n"
    finally:
        await rt.runtime.teardown(handle)
    assert rt.left_nothing("actions-1")
    # a command that keeps failing fails prepare, and leaves nothing behind
    with pytest.raises(PrepareFailed, match="exited 7 after 2 attempt"):
        await rt.runtime.prepare(
            rt.request("actions-2", prepare=[{"type": "run", "command": "exit 7", "retries": 1}])
        )
    assert rt.left_nothing("actions-2")
    # teardown is idempotent and works from a bare handle (prepare never ran)
    await rt.runtime.teardown(RuntimeHandle(kind=rt.kind, session_id="never", workdir="", host=""))

"""The `podman` runtime (daemonless; rootless where the host allows) with the local image.

`podman_image` copies polar/runtime:py311 from the local Docker engine into
podman's stores (`docker save | podman load`, no registry). The runtime tests
run in each mode: `rootless` (podman as the unprivileged `polar-runner` user)
and `root` (when the tests run as root); each prints which mode ran and why
`auto` picks what it picks. A rootless run on a host that cannot support it
(`rootless_support`: no user namespaces or `/dev/fuse` for the runner, or
cgroup v1, where the limits are ignored) is skipped with that reason, unless
rootless is what `auto` picks here: the default mode is never skipped.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.runtimes import InvalidRuntime, PrepareFailed, get_runtime
from activities.runtimes.channel import SANDBOX_DIR
from activities.runtimes.podman import (
    LABEL,
    PodmanRuntime,
    cgroup_v2,
    resolve_mode,
    rootless_support,
)
from polar.app.devstack import free_port
from polar.client.sdk import PolarClient
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.tasks.spec import DirSource, RuntimeSpec
from tests.support.container_sessions import (
    fixed_and_wrong_sessions,
    graded_in_a_moved_workspace,
    small_repo,
)

pytestmark = pytest.mark.slow


def _modes() -> list[str]:
    import os

    return ["rootless", "root"] if os.geteuid() == 0 else ["rootless"]


@pytest.fixture(params=_modes())
def runtime(request: pytest.FixtureRequest, podman_image: str) -> Iterator:
    if request.param == "rootless" and resolve_mode()[0] != "rootless":
        supported, why = rootless_support()
        if not supported:
            pytest.skip(f"rootless podman is not supported here: {why}")
    # the channel dir is bind-mounted: rootless podman (polar-runner) must reach it, which
    # pytest's 0700 tmp dirs forbid
    root = Path(tempfile.mkdtemp(prefix="polar-podman-"))
    root.chmod(0o711)
    rt = PodmanRuntime(root / "runtimes", mode=request.param)
    print(f"podman mode: {rt.mode}; auto here: {resolve_mode('auto')}")
    yield rt
    listed = rt.podman.run("ps", "--all", "--format", "{{.Names}}", check=False)
    for name in listed.stdout.decode().split():
        if name.startswith(rt.container_name("")):
            rt.podman.run("rm", "--force", "--ignore", "--time", "0", name, check=False)
    shutil.rmtree(root, ignore_errors=True)


def _request(session_id: str, source: object = None, **runtime: object) -> PrepareRequest:
    return PrepareRequest(
        session_id=session_id,
        task_id="t",
        runtime=RuntimeSpec.model_validate({"kind": "podman", **runtime}),
        source=source,
    )


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _exists(rt: PodmanRuntime, session_id: str) -> bool:
    name = rt.container_name(session_id)
    return rt.podman.run("container", "exists", name, check=False).returncode == 0


async def test_dir_source_command_output_exit_code_and_scratch(
    runtime: PodmanRuntime, tmp_path: Path
) -> None:
    started = time.monotonic()
    handle = await runtime.prepare(
        _request("dir-1", DirSource(path=str(small_repo(tmp_path))), cpus=1, memory="512m")
    )
    prepare_s = time.monotonic() - started
    try:
        assert handle.workdir == "/workspace" and handle.kind == "podman"
        (runtime.scratch(handle) / "input.txt").write_text("from the worker\n")
        command = (
            "test -e /run/.containerenv && pwd && cat hello.txt pkg/mod.py && "
            'cat "$SCRATCH/input.txt" && echo "$HOME" && echo "$SECRET" && echo to-stderr >&2 && '
            'echo result > "$SCRATCH/out.txt" && echo cfg > "$HOME/native.log" && exit 3'
        )
        env = {"SCRATCH": str(runtime.scratch(handle)), "SECRET": "s3cret value"}
        started = time.monotonic()
        outcome = await runtime.run(handle, command, env=env, log_name="cmd", timeout_s=60)
        run_s = time.monotonic() - started
        assert outcome.exit_code == 3 and not outcome.timed_out
        out, err = (_read(p) for p in runtime.log_paths(handle, "cmd"))
        assert out.splitlines() == [
            "/workspace",
            "hello",
            "X = 1",
            "from the worker",
            str(runtime.home(handle)),
            "s3cret value",
        ]
        assert err == "to-stderr\n"
        assert (runtime.scratch(handle) / "out.txt").read_text() == "result\n"
        assert (runtime.home(handle) / "native.log").read_text() == "cfg\n"
        (runtime.scratch(handle) / "out.txt").unlink()
        again = await runtime.run(
            handle,
            f"test ! -e {runtime.scratch(handle)}/out.txt",
            env={},
            log_name="again",
            timeout_s=60,
        )
        assert again.exit_code == 0
        assert (tmp_path / "repo" / "hello.txt").read_text() == "hello\n"
    finally:
        await runtime.teardown(handle)
    print(f"podman {runtime.mode}: prepare {prepare_s:.2f}s, one command {run_s:.2f}s")
    assert prepare_s < 30


async def test_limits_no_network_one_channel_mount_and_teardown(
    runtime: PodmanRuntime, tmp_path: Path
) -> None:
    handle = await runtime.prepare(
        _request("limits-1", DirSource(path=str(small_repo(tmp_path))), cpus=1.5, memory="256m")
    )
    name = runtime.container_name("limits-1")
    try:
        inspect = runtime.podman.run("container", "inspect", name)
        [attrs] = json.loads(inspect.stdout)
        host = attrs["HostConfig"]
        assert host["NetworkMode"] == "none"
        assert host["Init"] is True
        # the only mount: the session's channel dir, read-only
        assert [(m["Destination"], m["RW"]) for m in attrs["Mounts"]] == [(SANDBOX_DIR, False)]
        assert attrs["Config"]["Labels"][LABEL] == "limits-1"
        if runtime.mode == "rootless" and not cgroup_v2():
            # podman: "Resource limits are not supported and ignored on cgroups V1 rootless"
            print("podman rootless on cgroup v1: CPU/memory/pids limits are not enforced")
            assert host["NanoCpus"] == 0
        else:
            assert host["NanoCpus"] == 1_500_000_000
            assert host["Memory"] == host["MemorySwap"] == 256 * 1024 * 1024
            assert host["PidsLimit"] == 1024  # the default
            mem = await runtime.run(
                handle,
                "cat /sys/fs/cgroup/memory.max 2>/dev/null "
                "|| cat /sys/fs/cgroup/memory/memory.limit_in_bytes",
                env={},
                log_name="mem",
                timeout_s=30,
            )
            assert mem.exit_code == 0
            assert _read(runtime.log_paths(handle, "mem")[0]).strip() == str(256 * 1024 * 1024)
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
        finally:
            server.shutdown()
        assert outcome.exit_code != 0
        assert "Connection refused" in _read(runtime.log_paths(handle, "net")[1])
        # reap: a detached process is gone, the files and the container stay
        left = "setsid nohup sleep 303 >/dev/null 2>&1 & echo x > kept"
        await runtime.run(handle, left, env={}, log_name="left", timeout_s=30)
        await runtime.reap(handle)
        ps = await runtime.run(handle, "ps -eo args; cat kept", env={}, log_name="ps", timeout_s=30)
        assert ps.exit_code == 0
        assert "sleep 303" not in _read(runtime.log_paths(handle, "ps")[0])
        assert _read(runtime.log_paths(handle, "ps")[0]).endswith("x\n")
    finally:
        await runtime.teardown(handle)
    assert not _exists(runtime, "limits-1")
    assert not (runtime.root / "limits-1").exists()
    await runtime.teardown(RuntimeHandle(kind="podman", session_id="never", workdir="", host=""))


async def test_timeout_kills_the_whole_command(runtime: PodmanRuntime) -> None:
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
        assert ticks
        ps = await runtime.run(handle, "ps -eo args", env={}, log_name="ps", timeout_s=30)
        assert ps.exit_code == 0
        assert "sleep 30" not in _read(runtime.log_paths(handle, "ps")[0])
    finally:
        await runtime.teardown(handle)


async def test_prepare_actions_missing_image_and_wall_clock(
    runtime: PodmanRuntime, tmp_path: Path
) -> None:
    extra = tmp_path / "extra"
    (extra / "sub").mkdir(parents=True)
    (extra / "sub" / "data.txt").write_text("payload\n")
    flaky = "test -e /tmp/tried || { touch /tmp/tried; exit 1; }; echo ok > prepared.txt"
    handle = await runtime.prepare(
        _request(
            "actions-1",
            prepare=[
                {"type": "upload", "src": str(extra), "dest": "vendor/extra"},
                {"type": "run", "command": flaky, "retries": 1},
            ],
            wall_clock_s=6,
        )
    )
    try:
        outcome = await runtime.run(
            handle,
            "cat vendor/extra/sub/data.txt prepared.txt",
            env={},
            log_name="check",
            timeout_s=60,
        )
        assert outcome.exit_code == 0, _read(runtime.log_paths(handle, "check")[1])
        assert _read(runtime.log_paths(handle, "check")[0]) == "payload\nok\n"
        await asyncio.sleep(7)  # the container's whole lifetime is spent
        late = await runtime.run(handle, "true", env={}, log_name="late", timeout_s=30)
        assert late.timed_out
        assert "wall-clock" in _read(runtime.log_paths(handle, "late")[1])
    finally:
        await runtime.teardown(handle)
    with pytest.raises(PrepareFailed, match="exited 7 after 1 attempt"):
        await runtime.prepare(_request("actions-2", prepare=[{"type": "run", "command": "exit 7"}]))
    assert not _exists(runtime, "actions-2")
    with pytest.raises(InvalidRuntime, match="not found"):
        await runtime.prepare(_request("img-1", image="polar/no-such-image:1"))


async def test_session_end_to_end_in_podman(
    polar: PolarClient, podman_image: str, tmp_path: Path
) -> None:
    """A Temporal task whose sessions run in podman containers: the harness edits, the
    evaluator grades (the worker's `get_runtime("podman")`, in the `auto` mode)."""
    mode, why = resolve_mode()
    print(f"podman end to end in {mode} mode ({why})")
    repo = small_repo(tmp_path)
    fixed, wrong = await fixed_and_wrong_sessions(
        polar,
        repo,
        {"kind": "podman", "image": podman_image, "cpus": 1, "memory": "1g"},
        in_container="test -e /run/.containerenv",
        label="podman",
    )
    rt = get_runtime("podman", Path(polar.settings.data_dir))
    assert isinstance(rt, PodmanRuntime)
    for session in (fixed, wrong):
        listed = rt.podman.run(
            "ps", "--all", "--filter", f"label={LABEL}={session.session_id}", "--format", "{{.ID}}"
        )
        assert listed.stdout.strip() == b""
        assert not (Path(polar.settings.data_dir) / "runtimes" / session.session_id).exists()


async def test_a_moved_workspace_is_where_the_session_works_and_is_graded(
    runtime: PodmanRuntime, tmp_path: Path
) -> None:
    await graded_in_a_moved_workspace(runtime, "podman", tmp_path)

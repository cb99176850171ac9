"""The runtime contract: what every runtime kind honours, one suite run over each kind.

Kinds: `local` (the worker's sealed sandbox, activities/runtimes/kinds/local.py), `bwrap`
(the local runtime of a worker that is not root), `docker` and the `podman` modes
(`rootless`, and `root` when the tests run as root). `local` and `docker` are never
skipped. `bwrap` runs where this process is not root and detects it, else is skipped
naming why (a root worker seals with its own sandbox; tests/system/test_bwrap_sandbox.py
runs that mode as an unprivileged user); a rootless podman the host cannot support is
skipped with `rootless_support`'s reason unless it is what `auto` picks here. Cases that
only hold for containers (images, the wall-clock budget, a moved workspace, the engine's
inspect record) run over the container kinds. What is particular to one kind stays in its
file: test_docker_runtime.py, test_podman_runtime.py, test_bwrap_sandbox.py and the
local runtime's unit tests (tests/unit/activities/runtimes/).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.runtimes import ImageMissing, PrepareFailed, get_runtime
from activities.runtimes.kinds.docker import LABEL
from activities.runtimes.kinds.local import LocalRuntime
from activities.runtimes.network.channel_paths import SANDBOX_DIR
from activities.runtimes.sandboxes import bwrap
from activities.runtimes.sandboxes.local_sandbox import detect_sandbox
from polar.client.sdk import PolarClient
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.tasks.spec import DirSource, RuntimeSpec
from tests.support.container_sessions import (
    container_attrs,
    docker_runtime,
    fixed_and_wrong_sessions,
    graded_in_a_moved_workspace,
    podman_modes,
    podman_runtime,
    runtime_root,
    small_repo,
)
from tests.support.ports import free_port
from tests.support.runtime_kinds import every_runtime_kind

pytestmark = pytest.mark.slow

CONTAINER_KINDS = ["docker", *(f"podman-{mode}" for mode in podman_modes())]
KINDS = every_runtime_kind(["local", "bwrap", *CONTAINER_KINDS])


def _local(root: Path, kind: str) -> Iterator[LocalRuntime]:
    if kind == "bwrap":
        if os.geteuid() == 0:
            pytest.skip(
                "the bwrap mode is a non-root worker's; this one is root and seals with its "
                "own sandbox (tests/system/test_bwrap_sandbox.py runs bwrap unprivileged)"
            )
        sandbox = detect_sandbox()
        if sandbox.mode != bwrap.MODE:
            pytest.skip(f"no bwrap sandbox here: {sandbox.mode} ({sandbox.reason})")
    rt = LocalRuntime(root)
    print(f"{kind}: local runtime in the {rt.sandbox.mode} sandbox")
    yield rt


def _runtime(kind: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    with runtime_root(f"polar-{kind}-") as root:
        if kind in ("local", "bwrap"):
            yield from _local(root, kind)
        elif kind == "docker":
            request.getfixturevalue("docker_image")
            yield from docker_runtime(root)
        else:
            request.getfixturevalue("podman_image")
            yield from podman_runtime(root, kind.removeprefix("podman-"))


@pytest.fixture(params=KINDS)
def runtime(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Each runtime kind, built as a worker builds it, under a root its sandbox reaches."""
    yield from _runtime(request.param, request)


@pytest.fixture(params=CONTAINER_KINDS)
def container_runtime(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The container kinds only: for cases about images and the engine."""
    yield from _runtime(request.param, request)


def _request(
    runtime: Any, session_id: str, source: DirSource | None = None, **spec: object
) -> PrepareRequest:
    return PrepareRequest(
        session_id=session_id,
        task_id="t",
        runtime=RuntimeSpec.model_validate({"kind": runtime.kind, **spec}),
        source=source,
    )


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _inside(runtime: Any, session_id: str) -> str:
    """A command that succeeds only inside this kind's sandbox of `session_id`."""
    return {
        "docker": "test -f /.dockerenv",
        "podman": "test -e /run/.containerenv",
        "local": f'test "$POLAR_SANDBOX" = {session_id}',
    }[runtime.kind]


def _is_container(runtime: Any) -> bool:
    return runtime.kind in ("docker", "podman")


def _fast_ticks(runtime: Any) -> dict[str, float]:
    """The containers' own `tick_s` knob (the local runtime ticks every 2 s)."""
    return {"tick_s": 0.5} if _is_container(runtime) else {}


async def test_dir_source_command_output_exit_code_and_scratch(
    runtime: Any, tmp_path: Path
) -> None:
    started = time.monotonic()
    handle = await runtime.prepare(
        _request(runtime, "dir-1", DirSource(path=str(small_repo(tmp_path))), cpus=1, memory="512m")
    )
    prepare_s = time.monotonic() - started
    try:
        assert handle.kind == runtime.kind
        if _is_container(runtime):
            assert handle.workdir == "/workspace"
        (runtime.scratch(handle) / "input.txt").write_text("from the worker\n")
        command = (
            f"{_inside(runtime, 'dir-1')} && pwd && cat hello.txt pkg/mod.py && "
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
    print(f"{runtime.kind}: prepare {prepare_s:.2f}s, one command {run_s:.2f}s")
    assert prepare_s < 30


def _assert_container_record(runtime: Any, attrs: dict[str, Any], handle: RuntimeHandle) -> None:
    """The engine's record of a container prepared with cpus=1.5, memory=256m."""
    from activities.runtimes.kinds.podman import cgroup_v2

    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["Init"] is True
    # the only mounts, read-only: the session's channel dir and Polar's toolbox
    from activities.runtimes.toolbox import TOOLBOX_DIR

    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert sorted((d, m["RW"]) for d, m in mounts.items()) == [
        (SANDBOX_DIR, False),
        (TOOLBOX_DIR, False),
    ], mounts
    assert mounts[SANDBOX_DIR]["Source"] == str(runtime.channel_dir(handle))
    assert attrs["Config"]["Labels"][LABEL] == "limits-1"
    if runtime.kind == "podman" and runtime.mode == "rootless" and not cgroup_v2():
        # podman: "Resource limits are not supported and ignored on cgroups V1 rootless"
        print("podman rootless on cgroup v1: CPU/memory/pids limits are not enforced")
        assert host["NanoCpus"] == 0
        return
    assert host["NanoCpus"] == 1_500_000_000
    assert host["Memory"] == host["MemorySwap"] == 256 * 1024 * 1024
    assert host["PidsLimit"] == 1024  # the default
    if runtime.kind == "docker":
        assert {u["Name"]: u["Hard"] for u in host["Ulimits"]}["fsize"] == 10 * 1024**3


async def test_limits_no_network_and_teardown(runtime: Any, tmp_path: Path) -> None:
    """No way out but the channel: a server on the worker's loopback (like Temporal or S3) is
    unreachable; a container's record shows the limits and the channel as its one mount;
    teardown removes everything, is idempotent and works from a bare handle."""
    handle = await runtime.prepare(
        _request(
            runtime, "limits-1", DirSource(path=str(small_repo(tmp_path))), cpus=1.5, memory="256m"
        )
    )
    try:
        if _is_container(runtime):
            attrs = container_attrs(runtime, "limits-1")
            assert attrs is not None
            _assert_container_record(runtime, attrs, handle)
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
                handle, f'python3 -c "{fetch}"', env={}, log_name="net", timeout_s=60
            )
            ifaces = await runtime.run(
                handle, "cat /proc/net/dev", env={}, log_name="ifaces", timeout_s=60
            )
        finally:
            server.shutdown()
        assert outcome.exit_code != 0
        assert "Connection refused" in _read(runtime.log_paths(handle, "net")[1])
        assert ifaces.exit_code == 0
        interfaces = [
            line.split(":")[0].strip()
            for line in _read(runtime.log_paths(handle, "ifaces")[0]).splitlines()[2:]
        ]
        assert interfaces == ["lo"]
    finally:
        await runtime.teardown(handle)
    assert not (runtime.root / "limits-1").exists()
    if _is_container(runtime):
        assert container_attrs(runtime, "limits-1") is None
    await runtime.teardown(handle)  # idempotent
    # a bare handle (prepare never ran)
    await runtime.teardown(
        RuntimeHandle(kind=runtime.kind, session_id="never", workdir="", host="")
    )


async def test_nothing_a_command_detached_outlives_it(runtime: Any) -> None:
    """A detached writer (its own session, reparented to the init) dies when its command
    exits, before any reap: containers by the exit sweep (activities/runtimes/exit_sweep.py),
    `local` and `bwrap` with the PID namespace whose init the command is."""
    handle = await runtime.prepare(_request(runtime, "detach-1"))
    try:
        writer = "setsid nohup bash -c 'while :; do date +%s%N >> beat; sleep 0.1; done' "
        started = f"echo x > kept; {writer} >/dev/null 2>&1 & sleep 1; echo started"
        outcome = await runtime.run(handle, started, env={}, log_name="w", timeout_s=30)
        assert outcome.exit_code == 0
        count = "cat kept; cat beat | wc -l; ps -eo args"
        first = await runtime.run(handle, count, env={}, log_name="c1", timeout_s=30)
        await asyncio.sleep(1.5)
        second = await runtime.run(handle, count, env={}, log_name="c2", timeout_s=30)
        assert first.exit_code == 0 and second.exit_code == 0
        listing, again = (
            _read(runtime.log_paths(handle, name)[0]).splitlines() for name in ("c1", "c2")
        )
        assert listing[0] == "x" and int(listing[1]) > 0, listing  # it ran, then stopped
        assert again[:2] == listing[:2], (listing, again)
        assert not any("while :" in line for line in again[2:]), again
    finally:
        await runtime.teardown(handle)


async def test_reap_kills_what_runs(runtime: Any) -> None:
    """`reap` kills a command still running (the last attempt's, its worker gone): the files
    stay and the sandbox works (a container keeps its wall-clock deadline)."""
    handle = await runtime.prepare(_request(runtime, "reap-1"))
    try:
        before = container_attrs(runtime, "reap-1") if _is_container(runtime) else None
        writer = "echo x > kept; while :; do date +%s%N >> beat; sleep 0.1; done"
        running = asyncio.create_task(
            runtime.run(handle, writer, env={}, log_name="w", timeout_s=120)
        )
        await asyncio.sleep(3)  # it writes
        await runtime.reap(handle)
        await asyncio.wait_for(running, timeout=60)  # the exec ended with its processes
        count = "cat kept; cat beat | wc -l"
        first = await runtime.run(handle, count, env={}, log_name="c1", timeout_s=30)
        await asyncio.sleep(1)
        second = await runtime.run(handle, count, env={}, log_name="c2", timeout_s=30)
        assert first.exit_code == 0 and second.exit_code == 0
        listing, again = (
            _read(runtime.log_paths(handle, name)[0]).split() for name in ("c1", "c2")
        )
        assert listing[0] == "x" and int(listing[1]) > 0, listing  # the file system survived
        assert again == listing  # none writes
        if before is not None:
            after = container_attrs(runtime, "reap-1")
            assert after is not None
            assert after["Config"]["Env"] == before["Config"]["Env"]  # same POLAR_DEADLINE
    finally:
        await runtime.teardown(handle)


PLANT = r"""
ws=$(pwd -P)
for dir in $(echo "$PATH" | tr ':' ' ') /usr/bin /bin; do
  [ -d "$dir" ] && [ -w "$dir" ] || continue
  for tool in git bash sh sleep date cp rm mkdir printf python3 cat; do
    real=$(command -v "$tool" 2>/dev/null) || continue
    [ -e "$dir/$tool.real" ] || cp -L "$real" "$dir/$tool.real" 2>/dev/null || continue
    note='[ -e %s/.cache/armed ] && echo "$0 $*" >> %s/ran-%s'
    printf "#!%s/sh.real\\n$note\\nexec %s/%s.real \"\$@\"\\n" \
      "$dir" "$ws" "$ws" "$tool" "$dir" "$tool" > "$dir/$tool.new" && chmod 755 "$dir/$tool.new" \
      && mv -f "$dir/$tool.new" "$dir/$tool" && echo "planted $dir/$tool"
  done
done
echo fixed > hello.txt
mkdir -p .cache && : > .cache/armed  # from here on, each run of a planted program is noted
"""
"""A harness that replaces every program on its PATH it can write (the session's venv on
`local` and `bwrap`, the image's /usr/bin and /bin in a container) with a wrapper that notes
each run in the workspace once the harness is done, then makes its fix."""


async def test_after_the_harness_nothing_it_wrote_runs(runtime: Any, tmp_path: Path) -> None:
    """The trusted base (docs/threat-model.md): from the harness's exit on, nothing the worker
    runs comes from where the session could write. The harness replaces the programs on its
    PATH; the reap (which restarts a container's main process) and the extraction of its
    changes then run none of them: the patch is its fix alone, no `ran-*` note appears in
    the workspace, even seconds later, and a container's main process is Polar's toolbox."""
    from activities.evaluators.baseline import record_baseline
    from activities.evaluators.patches import extract_patch
    from activities.runtimes.toolbox import BUSYBOX

    source = DirSource(path=str(small_repo(tmp_path)))
    handle = await runtime.prepare(_request(runtime, "trusted-1", source))
    try:
        handle = await record_baseline(runtime, handle)
        planted = await runtime.run(handle, PLANT, env={}, log_name="plant", timeout_s=60)
        out = _read(runtime.log_paths(handle, "plant")[0])
        assert planted.exit_code == 0, _read(runtime.log_paths(handle, "plant")[1])
        assert "planted" in out and "/git" in out, out  # the attack reached its PATH's git
        await runtime.reap(handle)  # what the run stage does after every harness exit
        await asyncio.sleep(4)  # a restarted main process of the harness's would write now
        assert handle.baseline
        patch, files, _ = await extract_patch(runtime, handle, handle.baseline)
        assert files == ["hello.txt"], (files, patch[:2000])
        copy = tmp_path / "copy"
        copy.mkdir()
        await runtime.copy_workspace(handle, copy)
        assert (copy / "hello.txt").read_text() == "fixed\n"
        assert not sorted(p.name for p in copy.glob("ran-*")), (copy / "ran-sleep").exists()
        if _is_container(runtime):
            attrs = container_attrs(runtime, "trusted-1")
            assert attrs is not None
            main = [attrs["Path"], *attrs["Args"]]
            assert BUSYBOX in main[:3] and "sleep" in " ".join(main), main
    finally:
        await runtime.teardown(handle)


async def test_timeout_kills_the_whole_command(runtime: Any) -> None:
    handle = await runtime.prepare(_request(runtime, "timeout-1"))
    try:
        ticks: list[float] = []
        outcome = await runtime.run(
            handle,
            "sleep 300 & sleep 301",
            env={},
            log_name="slow",
            timeout_s=3,
            on_tick=ticks.append,
            **_fast_ticks(runtime),
        )
        assert outcome.timed_out and outcome.exit_code is None
        assert outcome.duration_s < 15
        assert ticks  # heartbeats while it ran
        ps = await runtime.run(handle, "ps -eo args", env={}, log_name="ps", timeout_s=30)
        assert ps.exit_code == 0
        assert "sleep 30" not in _read(runtime.log_paths(handle, "ps")[0])
    finally:
        await runtime.teardown(handle)


async def test_cancellation_kills_the_command(runtime: Any) -> None:
    handle = await runtime.prepare(_request(runtime, "cancel-1"))
    try:
        task = asyncio.create_task(
            runtime.run(handle, "sleep 302", env={}, log_name="c", timeout_s=120)
        )
        await asyncio.sleep(2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        ps = await runtime.run(handle, "ps -eo args", env={}, log_name="ps", timeout_s=30)
        assert ps.exit_code == 0
        assert "sleep 302" not in _read(runtime.log_paths(handle, "ps")[0])
    finally:
        await runtime.teardown(handle)


async def test_prepare_actions_upload_and_retry(runtime: Any, tmp_path: Path) -> None:
    """Uploads (a dir, and for a container a file at an absolute path) and a retried command;
    a command that keeps failing fails prepare and leaves nothing behind."""
    extra = tmp_path / "extra"
    (extra / "sub").mkdir(parents=True)
    (extra / "sub" / "data.txt").write_text("payload\n")
    (tmp_path / "one.cfg").write_text("k=v\n")
    flaky = (
        'test -e "${TMPDIR:-/tmp}/tried" || { touch "${TMPDIR:-/tmp}/tried"; exit 1; }; '
        "echo ok > prepared.txt"
    )
    actions: list[dict[str, object]] = [
        {"type": "upload", "src": str(extra), "dest": "vendor/extra"}
    ]
    expected = "payload\n"
    reads = "vendor/extra/sub/data.txt"
    if _is_container(runtime):  # the local runtime refuses uploads outside the workspace
        cfg: dict[str, object] = {
            "type": "upload",
            "src": str(tmp_path / "one.cfg"),
            "dest": "/etc/polar/one.cfg",
        }
        actions.append(cfg)
        expected += "k=v\n"
        reads += " /etc/polar/one.cfg"
    actions.append({"type": "run", "command": flaky, "retries": 1})
    handle = await runtime.prepare(
        _request(runtime, "actions-1", DirSource(path=str(small_repo(tmp_path))), prepare=actions)
    )
    try:
        outcome = await runtime.run(
            handle, f"cat {reads} prepared.txt", env={}, log_name="check", timeout_s=60
        )
        assert outcome.exit_code == 0, _read(runtime.log_paths(handle, "check")[1])
        assert _read(runtime.log_paths(handle, "check")[0]) == expected + "ok\n"
    finally:
        await runtime.teardown(handle)
    with pytest.raises(PrepareFailed, match="exited 7 after 2 attempt"):
        await runtime.prepare(
            _request(
                runtime, "actions-2", prepare=[{"type": "run", "command": "exit 7", "retries": 1}]
            )
        )
    with pytest.raises(PrepareFailed, match="exited 7 after 1 attempt"):
        await runtime.prepare(
            _request(runtime, "actions-3", prepare=[{"type": "run", "command": "exit 7"}])
        )
    if _is_container(runtime):  # no container is left; the session dir (its logs) stays
        for session_id in ("actions-2", "actions-3"):
            assert container_attrs(runtime, session_id) is None


async def test_missing_image_and_wall_clock_budget(container_runtime: Any) -> None:
    runtime = container_runtime
    with pytest.raises(ImageMissing, match="'polar/no-such-image:1' is not on this worker"):
        await runtime.prepare(_request(runtime, "img-1", image="polar/no-such-image:1"))
    handle = await runtime.prepare(_request(runtime, "wall-1", wall_clock_s=6))
    try:
        await asyncio.sleep(7)  # the container's whole lifetime is spent
        outcome = await runtime.run(handle, "true", env={}, log_name="late", timeout_s=30)
        assert outcome.timed_out
        assert "wall-clock" in _read(runtime.log_paths(handle, "late")[1])
    finally:
        await runtime.teardown(handle)


async def test_a_moved_workspace_is_where_the_session_works_and_is_graded(
    container_runtime: Any, tmp_path: Path
) -> None:
    await graded_in_a_moved_workspace(container_runtime, container_runtime.kind, tmp_path)


def _labelled(runtime: Any, session_id: str) -> list[str]:
    """The containers labelled with the session, whatever their name."""
    label = f"{LABEL}={session_id}"
    if runtime.kind == "docker":
        import docker

        return [
            str(c.id) for c in docker.from_env().containers.list(all=True, filters={"label": label})
        ]
    listed = runtime.podman.run("ps", "--all", "--filter", f"label={label}", "--format", "{{.ID}}")
    return listed.stdout.decode().split()


@pytest.mark.parametrize("kind", ["docker", "podman"])
async def test_session_end_to_end_in_a_container(
    kind: str, polar: PolarClient, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A Temporal task whose sessions run in containers (the worker's `get_runtime(kind)`;
    podman in its `auto` mode): the harness edits, the evaluator grades, teardown removes
    each container and host dir."""
    image = request.getfixturevalue(f"{kind}_image")
    in_container = {"docker": "test -f /.dockerenv", "podman": "test -e /run/.containerenv"}
    fixed, wrong = await fixed_and_wrong_sessions(
        polar,
        small_repo(tmp_path),
        {"kind": kind, "image": image, "cpus": 1, "memory": "1g"},
        in_container=in_container[kind],
        label=kind,
    )
    rt = get_runtime(kind, Path(polar.settings.data_dir))
    if kind == "podman":
        print(f"podman end to end in {rt.mode} mode")  # type: ignore[attr-defined]
    for session in (fixed, wrong):  # whatever the worker's namespace named them
        assert _labelled(rt, session.session_id) == []
        assert not (Path(polar.settings.data_dir) / "runtimes" / session.session_id).exists()

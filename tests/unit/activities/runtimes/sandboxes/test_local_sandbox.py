"""The `local` runtime's sandbox, with real processes: who commands run as, what outlives
them, what they reach, what they inherit from the worker."""

from __future__ import annotations

import asyncio
import os
import pwd
import shlex
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from activities.runtimes.base import InvalidRuntime
from activities.runtimes.kinds.local import LocalRuntime
from activities.runtimes.network.channel_paths import SANDBOX_PORT
from activities.runtimes.sandboxes.local_sandbox import HARNESS_USER, candidates, detect_sandbox
from polar.contracts import PrepareRequest, RuntimeHandle
from polar.tasks.spec import DirSource, RuntimeSpec

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the sealed sandbox needs a root worker (CI runs as root)"
)


def _request(source: Path, session_id: str, prepare: list[dict] | None = None) -> PrepareRequest:
    return PrepareRequest(
        session_id=session_id,
        task_id="sandbox",
        runtime=RuntimeSpec.model_validate({"kind": "local", "prepare": prepare or []}),
        source=DirSource(path=str(source)),
    )


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A small git repository, made by the worker (root)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    return repo


@pytest.fixture
async def session(
    tmp_path: Path, source: Path
) -> AsyncIterator[tuple[LocalRuntime, RuntimeHandle]]:
    runtime = LocalRuntime(tmp_path / "runtimes")
    handle = await runtime.prepare(_request(source, f"sbx-{uuid.uuid4().hex[:8]}"))
    yield runtime, handle
    await runtime.teardown(handle)


async def _run(
    runtime: LocalRuntime, handle: RuntimeHandle, command: str, timeout_s: float = 60, **env: str
) -> tuple[int | None, bool, str, str]:
    """(exit code, timed out, stdout, stderr) of `command`, each run with its own log."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    outcome = await runtime.run(handle, command, env=env, log_name=name, timeout_s=timeout_s)
    out, err = (p.read_text() for p in runtime.log_paths(handle, name))
    return outcome.exit_code, outcome.timed_out, out, err


def _alive_with(token: str) -> list[int]:
    """Host pids whose command line holds `token`."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if token.encode() in cmdline and int(name) != os.getpid():
                pids.append(int(name))
    return pids


def _detach(beat: Path, token: str) -> str:
    """A command that leaves a detached process (double fork, own session, nohup) appending
    to `beat` every 0.1 s, and returns once it has written."""
    loop = 'while :; do echo x >> "$0"; sleep 0.1; done'
    return (
        f"( setsid nohup bash -c '{loop}' {beat} {token} >/dev/null 2>&1 & ); "
        f"until [ -s {beat} ]; do sleep 0.05; done"
    )


async def _assert_stopped(beat: Path, token: str) -> None:
    assert _alive_with(token) == [], "the detached process outlived the command"
    size = beat.stat().st_size
    await asyncio.sleep(0.5)  # five beats, were it alive
    assert beat.stat().st_size == size, "the file is still growing"


def test_default_mode_is_sealed() -> None:
    sandbox = detect_sandbox()
    assert sandbox.sealed, f"the local runtime fell back to {sandbox.mode}: {sandbox.reason}"
    assert sandbox.uid == pwd.getpwnam(HARNESS_USER).pw_uid != os.geteuid()


async def test_commands_run_as_the_unprivileged_user_who_owns_the_workspace(
    tmp_path: Path, source: Path
) -> None:
    runtime = LocalRuntime(tmp_path / "runtimes")
    prepare = [{"type": "run", "command": "id -u > prepared-by"}]
    handle = await runtime.prepare(_request(source, "sbx-user", prepare))
    try:
        workspace = Path(handle.workdir)
        uid = (workspace.parent / "home").stat().st_uid  # the session's own pool user
        assert uid in runtime.uid_pool and pwd.getpwuid(uid).pw_name == f"polar-h{uid}"
        assert (workspace / "prepared-by").read_text().strip() == str(uid)
        code, _, out, err = await _run(
            runtime, handle, "id -u; git status --short; git rev-parse HEAD; touch made"
        )
        assert code == 0, err  # no "dubious ownership": the runner owns its checkout
        assert out.splitlines()[0] == str(uid) != str(os.geteuid())
        assert (workspace / "made").stat().st_uid == uid
        base = workspace.parent
        for sub in ("workspace", "home", "scratch", "tmp"):
            assert (base / sub).stat().st_uid == uid, sub
        for sub in ("logs", "channel"):
            assert (base / sub).stat().st_uid == os.geteuid(), sub
        code, _, _, _ = await _run(runtime, handle, f"touch {base}/channel/planted")
        assert code != 0, "the channel dir must be read-only for the sandbox"
        assert runtime.channel_in_sandbox(handle) == str(base / "channel")
    finally:
        await runtime.teardown(handle)


async def test_what_the_worker_writes_in_home_is_the_harness_users_before_each_command(
    session: tuple[LocalRuntime, RuntimeHandle], tmp_path: Path
) -> None:
    """Files the worker (root) puts in home and scratch between commands (a harness config,
    an evaluator's input) are given to the harness user, without following a symlink."""
    runtime, handle = session
    outside = tmp_path / "outside.txt"  # root's, where a symlink in home points
    outside.write_text("root's\n")
    home = runtime.home(handle)
    (home / ".config" / "tool").mkdir(parents=True)
    (home / ".config" / "tool" / "settings.json").write_text("{}")
    (home / "link").symlink_to(outside)
    (runtime.scratch(handle) / "input.txt").write_text("in\n")
    code, _, _, err = await _run(
        runtime, handle, "cat ~/.config/tool/settings.json && echo more >> ~/.config/tool/x"
    )
    assert code == 0, err
    uid = home.stat().st_uid  # the session's pool user
    assert uid in runtime.uid_pool
    for path in (home / ".config", home / ".config" / "tool" / "settings.json"):
        assert path.stat().st_uid == uid, path
    assert (runtime.scratch(handle) / "input.txt").stat().st_uid == uid
    assert (home / "link").lstat().st_uid == uid  # the link itself
    assert outside.stat().st_uid == os.geteuid()  # never what it points at


async def test_nothing_outlives_the_command(session: tuple[LocalRuntime, RuntimeHandle]) -> None:
    runtime, handle = session
    beat, token = runtime.scratch(handle) / "beat", f"polar-beat-{uuid.uuid4().hex}"
    code, timed_out, _, err = await _run(runtime, handle, _detach(beat, token))
    assert (code, timed_out) == (0, False), err
    await _assert_stopped(beat, token)
    await runtime.reap(handle)  # nothing left to reap: a no-op


async def test_nothing_outlives_a_timeout(session: tuple[LocalRuntime, RuntimeHandle]) -> None:
    runtime, handle = session
    beat, token = runtime.scratch(handle) / "beat", f"polar-beat-{uuid.uuid4().hex}"
    code, timed_out, _, _ = await _run(
        runtime, handle, f"{_detach(beat, token)}; sleep 300", timeout_s=3
    )
    assert timed_out and code is None
    await _assert_stopped(beat, token)


async def test_only_loopback_and_the_channel_socket(
    session: tuple[LocalRuntime, RuntimeHandle],
) -> None:
    runtime, handle = session
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen()
    host.setblocking(False)
    port = host.getsockname()[1]
    channel = runtime.channel_dir(handle)
    path = channel / "test.sock"

    async def pong(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"pong")
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(pong, path=str(path))
    path.chmod(0o666)
    probe = (
        "import socket, sys\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        "    print('host port: reached')\n"
        "except OSError as exc:\n    print('host port:', type(exc).__name__)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.connect({str(path)!r})\n"
        "print('channel:', s.recv(4).decode())\n"
    )
    try:
        code, _, out, err = await _run(
            runtime, handle, f"ip -o link show | cut -d: -f2; python3 -c {shlex.quote(probe)}"
        )
    finally:
        server.close()
        await server.wait_closed()
    assert code == 0, err
    assert out.split() == ["lo", "host", "port:", "ConnectionRefusedError", "channel:", "pong"]
    with pytest.raises(BlockingIOError):
        host.accept()  # nothing arrived on the host's loopback
    host.close()


async def test_environment_is_minimal_and_not_the_workers(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POLAR_SECRET_PROBE", "leaked")
    runtime = LocalRuntime(tmp_path / "runtimes")
    first = await runtime.prepare(_request(source, "sbx-env-1"))
    second = await runtime.prepare(_request(source, "sbx-env-2"))
    try:
        code, _, out, err = await _run(runtime, first, "env -0", CALLER="given")
        assert code == 0, err
        env = dict(line.split("=", 1) for line in out.split("\0") if line)
        assert "POLAR_SECRET_PROBE" not in env
        assert "VIRTUAL_ENV" not in env
        assert str(Path(sys.executable).parent) not in env["PATH"].split(":")
        # the session's own venv (writable: `pip install -e .`) over the harnesses' one
        venv = runtime.home(first).parent / "venv" / "bin"
        assert env["PATH"].split(":")[:2] == [str(venv), str(runtime.python_dir)]
        assert env["CALLER"] == "given"
        assert env["HOME"] == str(runtime.home(first))
        assert env["TMPDIR"] == str(runtime.tmp(first))
        assert Path(env["TMPDIR"]).parent == Path(first.workdir).parent
        assert runtime.tmp(second) != runtime.tmp(first)
        code, _, _, err = await _run(runtime, first, "python -c 'import temporalio'")
        assert code != 0 and "ModuleNotFoundError" in err, "the worker's venv is reachable"
        code, _, _, err = await _run(runtime, first, "python -c 'import openai, anthropic'")
        assert code == 0, f"the harness venv (infra/setup.sh: .venv-harness) lacks an SDK: {err}"
        code, _, _, err = await _run(runtime, first, 'touch "$TMPDIR/t" "$HOME/h"')
        assert code == 0, err
    finally:
        await runtime.teardown(first)
        await runtime.teardown(second)


async def test_teardown_removes_read_only_leftovers(
    session: tuple[LocalRuntime, RuntimeHandle],
) -> None:
    runtime, handle = session
    code, _, _, err = await _run(
        runtime, handle, "mkdir -p ro/sub && touch ro/sub/f && chmod -R a-w ro $HOME"
    )
    assert code == 0, err
    await runtime.teardown(handle)
    assert not Path(handle.workdir).parent.exists()


async def test_reap_drops_symlinks_the_worker_would_follow(
    session: tuple[LocalRuntime, RuntimeHandle],
) -> None:
    runtime, handle = session
    code, _, _, err = await _run(
        runtime,
        handle,
        'ln -s /etc/passwd "$HOME/config" && mkdir -p "$HOME/d" '
        '&& ln -s /etc "$HOME/d/etc" && echo ok > "$HOME/d/log"',
    )
    assert code == 0, err
    await runtime.reap(handle)
    home = runtime.home(handle)
    assert not (home / "config").is_symlink() and not (home / "d" / "etc").is_symlink()
    assert (home / "d" / "log").read_text() == "ok\n"


async def test_each_session_is_its_own_user_and_no_sibling_reaches_its_dirs(
    tmp_path: Path, source: Path
) -> None:
    """Two sessions of one runtime (siblings of a group, or a session and its evaluator's
    fresh runtime) run as two pool uids; neither can read, write or list the other's dirs,
    and a torn-down session's uid is free again."""
    runtime = LocalRuntime(tmp_path / "runtimes")
    one = await runtime.prepare(_request(source, "sbx-one"))
    two = await runtime.prepare(_request(source, "sbx-two"))
    try:
        bases = [Path(h.workdir).parent for h in (one, two)]
        uids = [(b / "home").stat().st_uid for b in bases]
        assert uids[0] != uids[1] and set(uids) <= set(runtime.uid_pool), uids
        for base, uid in zip(bases, uids, strict=True):
            assert base.stat().st_uid == 0 and base.stat().st_mode & 0o777 == 0o711
            for sub in ("workspace", "home", "scratch", "tmp"):
                st = (base / sub).stat()
                assert (st.st_uid, st.st_mode & 0o777) == (uid, 0o700), sub
        _, _, out, _ = await _run(runtime, one, "id -u")
        assert out.strip() == str(uids[0])
        other = bases[1]
        for attempt in (
            f"echo x > {other}/workspace/calc.py",
            f"ls {other}/workspace",
            f"cat {other}/workspace/a.txt",
            f"ln -s /etc/passwd {other}/scratch/model-apply.patch",
            f"ls {other.parent}",
        ):
            code, _, _, _ = await _run(runtime, one, attempt)
            assert code != 0, attempt
        await runtime.teardown(two)
        three = await runtime.prepare(_request(source, "sbx-three"))
        assert (Path(three.workdir).parent / "home").stat().st_uid == uids[1]
        await runtime.teardown(three)
    finally:
        await runtime.teardown(one)
        await runtime.teardown(two)


async def test_session_ids_cannot_leave_the_runtime_root(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "runtimes")
    handle = RuntimeHandle(kind="local", session_id="../../etc", workdir="/", host="h")
    with pytest.raises(InvalidRuntime):
        await runtime.teardown(handle)


@pytest.mark.parametrize("mode", ["pidns", "user", "group"])
async def test_fallback_modes_run_and_reap(tmp_path: Path, source: Path, mode: str) -> None:
    """What a host without the namespaces gets: still not the worker's user, never sealed,
    and `reap` kills what escaped where no PID namespace did."""
    user = pwd.getpwnam(HARNESS_USER)
    sandbox = next(s for s in candidates(user.pw_uid, user.pw_gid) if s.mode == mode)
    runtime = LocalRuntime(tmp_path / "runtimes", sandbox=sandbox)
    handle = await runtime.prepare(_request(source, f"sbx-{mode}"))
    try:
        assert runtime.channel_in_sandbox(handle) is None
        beat, token = runtime.scratch(handle) / "beat", f"polar-beat-{uuid.uuid4().hex}"
        code, _, out, err = await _run(runtime, handle, f"id -u; {_detach(beat, token)}")
        assert code == 0, err
        if mode != "group":  # the session's own pool user
            assert out.strip() == str(runtime.home(handle).stat().st_uid) != str(user.pw_uid)
        await runtime.reap(handle)
        await _assert_stopped(beat, token)
    finally:
        await runtime.teardown(handle)


async def test_unprivileged_worker_mode_uses_its_own_namespaces(
    tmp_path: Path, source: Path
) -> None:
    """The mode of a worker that is not root (user and PID namespaces), run here as root."""
    sandbox = next(s for s in candidates(None, None, root=False) if s.mode == "userns")
    runtime = LocalRuntime(tmp_path / "runtimes", sandbox=sandbox)
    handle = await runtime.prepare(_request(source, "sbx-userns"))
    try:
        assert runtime.channel_in_sandbox(handle) is None
        beat, token = runtime.scratch(handle) / "beat", f"polar-beat-{uuid.uuid4().hex}"
        code, _, _, err = await _run(runtime, handle, _detach(beat, token))
        assert code == 0, err
        await _assert_stopped(beat, token)
    finally:
        await runtime.teardown(handle)


async def test_an_open_channel_is_the_workers_socket_on_the_sandbox_loopback(
    session: tuple[LocalRuntime, RuntimeHandle],
) -> None:
    """While the channel is open, every command of the session is in one network where the
    worker listens at SANDBOX_PORT (no forwarder process); the command holds no descriptor
    of the worker's (not the namespace's, not the listener's) and cannot open them."""
    runtime, handle = session
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{SANDBOX_PORT} && echo hi >&3 && read -r got <&3"
    code, _, _, err = await _run(runtime, handle, connect)
    assert code != 0 and "refused" in err.lower(), "a closed channel's port is not served"
    async with runtime.open_channel(handle) as listener:
        assert listener is not None
        listener.setblocking(False)
        loop = asyncio.get_running_loop()

        async def echo_once() -> None:
            conn, _ = await loop.sock_accept(listener)
            with conn:
                data = await loop.sock_recv(conn, 64)
                await loop.sock_sendall(conn, b"worker:" + data)

        served = asyncio.create_task(echo_once())
        worker_fds = f"/proc/{os.getpid()}/fd"
        command = (
            f'{connect} && echo "$got"; for f in /proc/$$/fd/*; do readlink "$f"; done '
            '| tr "\\n" " "; echo; '
            f"ls {worker_fds} >/dev/null 2>&1 && echo opened || echo denied"
        )
        code, _, out, err = await _run(runtime, handle, command)
        await asyncio.wait_for(served, 10)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "worker:hi"
    held = lines[1].split()  # the shell's: stdin, the logs, its own connection
    assert not [t for t in held if t.startswith("net:")], held
    assert len([t for t in held if t.startswith("socket:")]) == 1, held
    assert lines[2] == "denied"
    code, _, _, err = await _run(runtime, handle, connect)
    assert code != 0 and "refused" in err.lower(), "the channel's network went with it"


async def test_a_second_channel_of_a_session_waits_for_the_first_to_close(
    session: tuple[LocalRuntime, RuntimeHandle],
) -> None:
    """A retried run can start while the attempt it replaces still closes its channel: the
    new one opens once the old one is gone, never beside it."""
    runtime, handle = session
    order: list[str] = []

    async def second() -> None:
        async with runtime.open_channel(handle) as listener:
            assert listener is not None
            order.append("second open")

    async with runtime.open_channel(handle):
        waiting = asyncio.create_task(second())
        await asyncio.sleep(0.3)
        assert not waiting.done(), "the second channel opened beside the first"
        order.append("first closing")
    await asyncio.wait_for(waiting, 10)
    assert order == ["first closing", "second open"]

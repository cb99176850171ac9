"""The toolbox's busybox is installed once per runtimes root, also when many containers start
side by side in one worker (threads of one process) on a fresh root."""

from __future__ import annotations

import os
import signal
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
        assert len(set(paths)) == 1 and paths[0].is_dir()
        assert sorted(p.name for p in (root / ".toolbox").iterdir()) == [paths[0].name]
        for name in toolbox.PROGRAMS:
            assert (paths[0] / name).stat().st_mode & 0o777 == 0o555
        assert (paths[0] / "bin" / "bash").readlink() == Path("../bash")
        assert (paths[0] / "bin" / "setsid").readlink() == Path("../busybox")


def test_the_channel_paths_name_the_toolbox_programs() -> None:
    """channel_paths keeps its own copy of the paths (it imports nothing of the runtimes')."""
    from activities.runtimes.network import channel_paths

    assert channel_paths.TOOLBOX_HELPER == toolbox.HELPER
    assert channel_paths.TOOLBOX_BASH == toolbox.BASH


def test_the_helper_forwards_and_runs_the_command_in_its_own_session(tmp_path: Path) -> None:
    """The static helper: `setsid` runs a program in a new session with its exit code;
    `forward` binds the port, runs the command in its place, and splices to the socket."""
    import socket
    import subprocess

    helper = str(toolbox.host_program("polar-helper"))
    code = subprocess.run([helper, "setsid", "/bin/sh", "-c", "exit 7"]).returncode
    assert code == 7
    sock_path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    server.listen(1)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = (  # the forwarder is this shell's child: its pid printed, to stop it after
        f"exec 3<>/dev/tcp/127.0.0.1/{port}; printf ping >&3; read -r -n 4 x <&3; "
        "read -r kids < /proc/$$/task/$$/children; echo $x $kids"
    )
    proc = subprocess.Popen(
        [
            helper,
            "forward",
            "--socket",
            str(sock_path),
            "--port",
            str(port),
            "--",
            "bash",
            "-c",
            client,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    conn, _ = server.accept()
    assert conn.recv(4) == b"ping"
    conn.sendall(b"pong")
    out, _ = proc.communicate(timeout=10)
    reply, forwarder = out.split()
    assert proc.returncode == 0 and reply == "pong"
    busy = subprocess.run(
        [helper, "forward", "--socket", str(sock_path), "--port", str(port), "--", "true"],
        capture_output=True,
        text=True,
    )  # the forwarder of the run above still listens there: no second one
    conn.close()
    os.kill(int(forwarder), signal.SIGKILL)
    assert busy.returncode == 97 and "did not start" in busy.stderr

"""The harness-started marker: seen when the sandbox reached the harness, absent otherwise."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from activities.runtimes import started_marker
from activities.runtimes.network.channel import with_forwarder
from activities.shell_command import run_shell


async def _run(tmp_path: Path, command: str, wrap: tuple[str, ...] = ()) -> tuple[int | None, Path]:
    stderr = tmp_path / "harness.stderr"
    outcome = await run_shell(
        command,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        stdout=tmp_path / "harness.stdout",
        stderr=stderr,
        timeout_s=30,
        wrap=wrap,
    )
    return outcome.exit_code, stderr


async def test_a_harness_that_ran_and_failed_left_the_marker(tmp_path: Path) -> None:
    nonce = started_marker.new_nonce()
    code, stderr = await _run(tmp_path, started_marker.with_marker("echo work; exit 3", nonce))
    assert code == 3  # the harness's own exit code, as without the marker
    assert started_marker.seen(stderr, nonce)
    assert not started_marker.seen(stderr, started_marker.new_nonce())  # another run's nonce


async def test_a_sandbox_that_never_started_left_no_marker(tmp_path: Path) -> None:
    """A sandbox runner that fails (an `nsenter` that cannot enter, here a stand-in) exits 1
    before the harness, just as a failed harness would, but leaves no marker."""
    nonce = started_marker.new_nonce()
    runner = ("sh", "-c", "echo 'nsenter: cannot open /proc/1/ns/mnt' >&2; exit 1", "runner")
    code, stderr = await _run(tmp_path, started_marker.with_marker("exit 0", nonce), runner)
    assert code == 1
    assert not started_marker.seen(stderr, nonce)
    assert "nsenter" in stderr.read_text()


async def test_a_forwarder_that_cannot_start_leaves_no_marker(tmp_path: Path) -> None:
    """The marker is written inside the gateway forwarder: a sandbox without python3 (or the
    forwarder's script) exits 97 before the harness, and no marker says it started."""
    nonce = started_marker.new_nonce()
    inner = started_marker.with_marker("echo harness ran", nonce)
    code, stderr = await _run(tmp_path, with_forwarder(inner, str(tmp_path / "no-channel")))
    assert code == 97
    assert not started_marker.seen(stderr, nonce)
    assert "harness ran" not in (tmp_path / "harness.stdout").read_text()


def test_a_link_in_the_logs_place_is_not_followed(tmp_path: Path) -> None:
    nonce = started_marker.new_nonce()
    planted = tmp_path / "planted"
    planted.write_text(started_marker.line(nonce) + "\n")
    (tmp_path / "harness.stderr").symlink_to(planted)
    assert not started_marker.seen(tmp_path / "harness.stderr", nonce)


async def _run_piped(
    tmp_path: Path, command: str | Callable[[tuple[int, int]], str], wrap: tuple[str, ...] = ()
) -> tuple[int | None, bool, Path]:
    """`command` (or `command(the pipe's fds)`) behind a `Pipe` marker, its ends passed as
    the local runtime passes them."""
    pipe = started_marker.Pipe(started_marker.new_nonce())
    text = command if isinstance(command, str) else command(pipe.fds)
    try:
        stderr = tmp_path / "harness.stderr"
        outcome = await run_shell(
            pipe.wrap(text),
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            stdout=tmp_path / "harness.stdout",
            stderr=stderr,
            timeout_s=30,
            wrap=wrap,
            pass_fds=pipe.fds,
        )
    finally:
        seen = pipe.close()
    return outcome.exit_code, seen, stderr


async def test_a_piped_marker_survives_a_harness_that_truncates_its_stderr(
    tmp_path: Path,
) -> None:
    """The harness holds its stderr log's descriptor and may truncate it; the marker is not
    there but in the worker's pipe, read before the harness began."""
    erase = "echo noise >&2; : > /proc/self/fd/2; truncate -s0 /proc/self/fd/2"
    for code in (0, 1):
        got, seen, stderr = await _run_piped(tmp_path, f"{erase}; exit {code}")
        assert got == code and seen, (got, seen)
        assert stderr.read_bytes() == b""  # erased indeed: a marker there would be gone


async def test_the_harness_cannot_reach_the_pipe(tmp_path: Path) -> None:
    """Both descriptors are closed before the harness command's first line: it can neither
    write a line of its own nor read the gate."""

    def probe(fds: tuple[int, int]) -> str:
        out, gate = fds
        return (
            f"printf x >&{out} && echo wrote; read -r -u {gate} _ && echo opened; ls /proc/self/fd"
        )

    code, seen, _ = await _run_piped(tmp_path, probe)
    assert code == 0 and seen
    text = (tmp_path / "harness.stdout").read_text()
    assert "wrote" not in text and "opened" not in text, text


async def test_a_sandbox_that_never_started_sends_no_marker(tmp_path: Path) -> None:
    runner = ("sh", "-c", "echo 'nsenter: cannot open /proc/1/ns/mnt' >&2; exit 1", "runner")
    code, seen, _ = await _run_piped(tmp_path, "exit 0", runner)
    assert code == 1 and not seen


async def test_a_line_that_is_not_this_runs_marker_does_not_count(tmp_path: Path) -> None:
    """Only the first line counts, and only with this run's nonce (a line written before the
    marker's, as if by the forwarder, stands in for any other)."""
    pipe = started_marker.Pipe(started_marker.new_nonce())
    other = started_marker.line(started_marker.new_nonce())
    try:
        outcome = await run_shell(
            f"printf '%s\\n' '{other}' >&{pipe.fds[0]}; " + pipe.wrap("exit 0"),
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            stdout=tmp_path / "o",
            stderr=tmp_path / "e",
            timeout_s=30,
            pass_fds=pipe.fds,
        )
    finally:
        seen = pipe.close()
    # the reader stops at the first line: the marker's own write may then meet a closed pipe
    # (SIGPIPE) where the two lines came in two reads, and the command never runs
    assert outcome.exit_code in (0, -signal.SIGPIPE) and not seen, outcome

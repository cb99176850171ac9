"""The harness-started marker: seen when the sandbox reached the harness, absent otherwise."""

from __future__ import annotations

from pathlib import Path

from activities.runtimes import started_marker
from activities.runtimes.channel import with_forwarder
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

"""The `local` runtime of a worker that is not root: sealed by bubblewrap, or refused.

The worker here is an ordinary user (tests/support/unprivileged.py), as on an
HPC node: its runtime detects the `bwrap` mode, and a session's commands are
probed from inside (tests/support/bwrap_scenario.py): only loopback, no port of
the worker's network, none of the worker's environment, processes, venv, data
dir or other sessions, read-only system dirs, the session's rlimits, no nested
user namespace, nothing alive after a command, and the gateway channel through
the relay's socket and the in-sandbox forwarder. Then the same worker on a host
that forbids unprivileged user namespaces (a user namespace of the test's whose
`user.max_user_namespaces` is 0): the mode is skipped with that reason and the
worker refuses to run sessions unless `allow_unsealed`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from activities.runtimes.sandboxes import bwrap
from tests.support import unprivileged

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _capable() -> None:
    reason = unprivileged.unavailable()
    if reason:
        print(f"skipping the unprivileged sandbox tests: {reason}")
        pytest.skip(reason)


def _scenario(what: str, prefix: list[str] | None = None) -> dict[str, Any]:
    data = unprivileged.user_dir("polar-bwrap-")
    try:
        argv = [unprivileged.SYSTEM_PYTHON, "-m", "tests.support.bwrap_scenario", what, str(data)]
        proc = subprocess.run(
            unprivileged.as_user([*(prefix or []), *argv]),
            cwd=unprivileged.ROOT,
            env=unprivileged.python_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(data, ignore_errors=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    return json.loads(lines[-1].removeprefix("REPORT "))


def test_a_non_root_workers_sessions_are_sealed_by_bwrap() -> None:
    report = _scenario("sealed")
    assert report["mode"] == bwrap.MODE and report["sealed"], report
    failed = {name: r for name, r in report["checks"].items() if r["exit"] != 0}
    assert not failed, failed
    assert report["detached"]["exit"] == 0, report["detached"]
    assert report["left_alive"] == [], "a detached process outlived its command"
    # the channel: a socket bound in at /run/polar, the forwarder serving the gateway URL
    assert report["channel_in_sandbox"] == "/run/polar" and report["listener"] is False
    channel = report["channel"]
    assert channel["exit"] == 0, channel
    assert json.loads(channel["out"]) == {"key": "the-key"}, channel  # the relay added it
    assert report["made"] == "made" and report["torn_down"] == [True, True]


def test_where_user_namespaces_are_forbidden_the_worker_refuses_unsealed_sessions() -> None:
    # a user namespace of the user's own in which no further one may be made: what a host
    # with user.max_user_namespaces = 0 looks like to the worker
    forbid = [
        "unshare",
        "--user",
        "--map-current-user",
        "--keep-caps",
        "--",
        "sh",
        "-c",
        "echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --inh-caps=-all "
        '--ambient-caps=-all --bounding-set=-all -- "$@"',
        "forbid",
    ]
    report = _scenario("refused", forbid)
    refused = report["refused"] or ""
    assert "refuses to run harnesses unsealed" in refused, report
    assert "user.max_user_namespaces = 0" in refused, refused
    assert "POLAR_ALLOW_UNSEALED" in refused
    # a deployment that says so runs them, unsealed
    assert report["allowed_mode"] not in ("sealed", bwrap.MODE), report
    assert report["allowed_run"]["out"].strip() == "ran", report


def test_auto_picks_the_sealed_local_runtime_for_a_user_without_an_engine() -> None:
    """Issue 26: `kind: auto` on a worker that is not root and reaches no engine is `local`
    sealed by bubblewrap; the sweep's kinds leave podman out where the user cannot run it,
    so listing them starts no rootless podman (whose pause process outlived the worker)."""
    before = _user_processes("catatonit")
    report = _scenario("auto")
    print(f"auto for {unprivileged.USER}: {report['kind']} ({report['why']})")
    assert "no Docker engine" in report["why"], report  # the user cannot reach dockerd
    if report["podman_usable"]:
        assert report["kind"] == report["handle_kind"] == "podman", report
    else:
        assert report["kind"] == report["handle_kind"] == "local", report
        assert report["mode"] == bwrap.MODE, report
        # a user who never ran podman (no storage of its own) is not made to start it
        if not report["podman_storage"]:
            assert "podman" not in report["sweep_kinds"], report
            assert _user_processes("catatonit") == before, "the sweep started rootless podman"
    assert report["run"]["exit"] == 0 and "ran-in-auto" in report["run"]["out"], report
    assert report["torn_down"] is True


def _user_processes(name: str) -> set[int]:
    """Pids of `name` processes of the test's ordinary user."""
    proc = subprocess.run(
        ["pgrep", "-u", unprivileged.USER, "-x", name], capture_output=True, text=True
    )
    return {int(p) for p in proc.stdout.split()}

"""The podman sidecars' command lines (activities/runtimes/kinds/podman_sidecars.py), on a
recording stand-in for the CLI: the namespace's holder first, on `--network none`; each
sidecar joins it with the hosts file; env values never on a command line; a missing image
is the task's error and a failed run the engine's. tests/system/test_harbor_compose.py runs
them on the real podman."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from docker.errors import APIError

from activities.runtimes.base import InvalidRuntime
from activities.runtimes.kinds.podman_sidecars import (
    health_args,
    holder_name,
    network_args,
    remove_args,
    start_sidecars,
)
from polar.tasks.runtime_spec import Sidecar
from polar.tasks.sidecar_spec import Healthcheck


class FakePodman:
    def __init__(self, images: set[str], fail: str | None = None) -> None:
        self.images, self.fail = images, fail
        self.calls: list[tuple[list[str], Any]] = []

    def image_id(self, image: str) -> str | None:
        return "id" if image in self.images else None

    def run(self, *args: str, env: Any = None, check: bool = True) -> Any:
        if args[:2] == ("container", "inspect"):  # the readiness wait's: each one running
            return subprocess.CompletedProcess(
                list(args), 0, b'[{"State": {"Status": "running"}}]', b""
            )
        self.calls.append((list(args), env))
        code = 125 if self.fail and self.fail in args else 0
        return subprocess.CompletedProcess(list(args), code, b"", b"boom")


SIDECARS = [
    Sidecar(name="db", image="img/db", env={"SECRET": "s3"}, memory="256m"),
    Sidecar(name="web", image="img/web", entrypoint=["sh", "-c"], command=["serve"], workdir="/w"),
]


def _start(podman: FakePodman, tmp_path: Path) -> Path:
    hosts = tmp_path / "hosts"
    common = ["--label", "k=v"]
    start_sidecars(podman, "c1", common, ["img/main", "sleep"], SIDECARS, hosts, {})  # type: ignore[arg-type]
    return hosts


def test_the_holder_comes_first_and_the_sidecars_join_it(tmp_path: Path) -> None:
    podman = FakePodman({"img/db", "img/web"})
    hosts = _start(podman, tmp_path)
    assert hosts.read_text() == "127.0.0.1\tlocalhost db web\n::1\tlocalhost\n"
    (holder, _), (db, db_env), (web, _) = podman.calls
    assert holder[holder.index("--name") + 1] == holder_name("c1") == "c1.sidecar--net"
    assert holder[holder.index("--network") + 1] == "none"
    assert holder[-2:] == ["img/main", "sleep"] and "--read-only" in holder
    for argv, name in ((db, "c1.sidecar-db"), (web, "c1.sidecar-web")):
        assert argv[argv.index("--name") + 1] == name
        assert argv[argv.index("--network") + 1] == "container:c1.sidecar--net"
        assert f"{hosts}:/etc/hosts:ro" in argv and "k=v" in argv
    assert "SECRET" in db and not any("s3" in a for a in db) and db_env["SECRET"] == "s3"
    assert db[db.index("--memory") + 1] == str(256 << 20)
    assert web[web.index("--entrypoint") + 1] == '["sh", "-c"]'
    assert web[-2:] == ["img/web", "serve"] and web[web.index("--workdir") + 1] == "/w"
    assert network_args("c1", hosts) == [
        "--network",
        "container:c1.sidecar--net",
        "--volume",
        f"{hosts}:/etc/hosts:ro",
    ]


def test_a_missing_image_is_the_tasks_error_before_anything_runs(tmp_path: Path) -> None:
    podman = FakePodman({"img/db"})
    with pytest.raises(InvalidRuntime, match="sidecar web: image 'img/web' is not in"):
        _start(podman, tmp_path)
    assert podman.calls == []


def test_a_failed_run_is_the_engines_error(tmp_path: Path) -> None:
    podman = FakePodman({"img/db", "img/web"}, fail="img/web")
    with pytest.raises(APIError, match="sidecar web failed"):
        _start(podman, tmp_path)


def test_teardown_takes_the_holder_and_all_that_depend_on_it() -> None:
    argv = remove_args("c1")
    assert argv[0] == "rm" and "--depend" in argv and "--ignore" in argv
    assert argv[-2:] == ["c1.sidecar--net", "c1"]


def test_a_healthcheck_goes_as_podman_43_parses_it() -> None:
    """Its `--health-cmd` splits a JSON array that starts with CMD on blanks: an argv goes
    without it (two words or more), a line or one word as CMD-SHELL; none: the image's off."""

    def cmd(command: list[str] | str) -> str:
        check = Healthcheck(command=command, interval_s=1.5, start_period_s=2)
        args = health_args(Sidecar(name="s", image="i", healthcheck=check))
        assert args[args.index("--health-interval") + 1] == "1500ms"
        assert args[args.index("--health-start-period") + 1] == "2000ms"
        return args[args.index("--health-cmd") + 1]

    assert cmd(["python3", "-c", "import os"]) == '["python3", "-c", "import os"]'
    assert cmd("curl -f localhost") == '["CMD-SHELL", "curl -f localhost"]'
    assert cmd(["my probe"]) == '["CMD-SHELL", "\'my probe\'"]'
    assert health_args(Sidecar(name="s", image="i")) == ["--no-healthcheck"]

"""RuntimeSpec.workdir: the container workspace's path, checked, left out at its default."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import ValidationError

from activities.runtimes.base import InvalidRuntime
from activities.runtimes.kinds.local import LocalRuntime
from polar.contracts import PrepareRequest
from polar.tasks.spec import DEFAULT_WORKDIR, RuntimeSpec, TaskSpec


def test_the_default_is_left_out_so_older_workers_read_the_spec() -> None:
    spec = RuntimeSpec(kind="docker")
    assert spec.workdir == DEFAULT_WORKDIR == "/workspace"
    assert "workdir" not in spec.model_dump() and "workdir" not in spec.model_dump_json()
    moved = RuntimeSpec(kind="docker", workdir="/app")
    assert moved.model_dump()["workdir"] == "/app"
    assert RuntimeSpec.model_validate_json(moved.model_dump_json()) == moved
    task = TaskSpec.model_validate(
        {
            "task_id": "t",
            "instruction": "x",
            "runtime": {"kind": "podman", "workdir": "/srv/app"},
            "harness": {"kind": "command", "command": "true"},
        }
    )
    assert TaskSpec.model_validate_json(task.model_dump_json()).runtime.workdir == "/srv/app"


@pytest.mark.parametrize(
    ("workdir", "why"),
    [
        ("app", "not absolute"),
        ("/", "root directory"),
        ("/app/", "not normalised"),
        ("/app/../etc", "not normalised"),
        ("//app", "not normalised"),
        ("/a\nb", "control characters"),
        ("/proc/1", "/proc"),
        ("/etc", "/etc"),
        ("/usr/src/app", "/usr"),
        ("/run/polar", "/run"),
        ("/tmp/work", "/tmp"),
        ("/var/lib/polar/runtimes", "/var/lib"),
        ("/tests", "/tests"),
        ("/logs/verifier", "/logs"),
        ("/var", "top-level"),
        ("/home", "top-level"),
    ],
)
def test_a_workdir_that_is_not_a_safe_absolute_path_is_refused(workdir: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        RuntimeSpec(kind="docker", workdir=workdir)


@pytest.mark.parametrize("workdir", ["/app", "/workspace/src", "/home/user/project", "/srv/x"])
def test_a_project_path_is_a_workdir(workdir: str) -> None:
    assert RuntimeSpec(kind="docker", workdir=workdir).workdir == workdir


def test_local_refuses_a_workdir_in_the_spec_and_at_prepare(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="for container runtimes"):
        RuntimeSpec(kind="local", workdir="/app")
    # `auto` may come to run on the local runtime: it refuses at prepare, naming why
    request = PrepareRequest(
        session_id="s1", task_id="t", runtime=RuntimeSpec(kind="auto", workdir="/app")
    )
    with pytest.raises(InvalidRuntime, match="'/app' is for container runtimes"):
        asyncio.run(LocalRuntime(tmp_path).prepare(request))
